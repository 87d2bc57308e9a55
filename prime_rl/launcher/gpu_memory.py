"""Whether the colocated roles fit on their one GPU, checked once the student is built and before any server
starts: the servers' shares plus what the trainer keeps resident (config/layout.py says how that is counted)."""

import subprocess
from pathlib import Path

from prime_rl.config.layout import gpu_fit_problem, gpu_shares
from prime_rl.config.schema import Config
from prime_rl.config.user_error import check

MIB = 1 << 20


def check_colocated_gpu(cfg: Config, gpu: str, student: Path) -> None:
    problem = gpu_fit_problem(cfg, gpu_total_bytes(gpu), param_count(student))
    check(
        problem is None,
        [*gpu_shares(cfg), "trainer.lora.enabled"],
        problem or "",
        "lower the servers' shares (their KV cache), use lora=on, or a GPU per role with deployment=gpu",
    )


def gpu_total_bytes(gpu: str) -> int:
    out = subprocess.run(
        ["nvidia-smi", "-i", gpu, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return int(out.split()[0]) * MIB


def param_count(model_dir: Path) -> int:
    """Parameters of the model in `model_dir`, counted on the meta device: nothing is loaded."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for p in model.parameters())
