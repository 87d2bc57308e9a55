"""Whether the roles fit their GPUs, checked once the student is built and before any server starts: colocated,
the servers' shares plus what the trainer keeps resident on their one GPU; separate, the trainer's state on its
own GPUs (config/layout.py says how each is counted)."""

import subprocess
from pathlib import Path

from prime_rl.config.layout import gpu_fit_problem, gpu_shares, trainer_fit_problem
from prime_rl.config.schema import Config
from prime_rl.config.user_error import check
from prime_rl.models.size import param_count

MIB = 1 << 20


def check_colocated_gpu(cfg: Config, gpu: str, student: Path) -> None:
    problem = gpu_fit_problem(cfg, gpu_total_bytes(gpu), param_count(student))
    check(
        problem is None,
        [*gpu_shares(cfg), "trainer.lora.enabled"],
        problem or "",
        "lower the servers' shares (their KV cache), use lora=on, or a GPU per role with deployment=gpu",
    )


def check_trainer_gpus(cfg: Config, gpu: str, student: Path) -> None:
    problem = trainer_fit_problem(cfg, gpu_total_bytes(gpu), param_count(student))
    check(
        problem is None,
        ["deployment.num_train_gpus", "trainer.lora.enabled"],
        problem or "",
        "give the trainer more GPUs (FSDP shards its state over them) or train an adapter with lora=on",
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
