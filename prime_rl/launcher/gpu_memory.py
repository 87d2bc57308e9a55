"""Whether the roles fit their GPUs, checked once the student is built and before any server starts: colocated,
the servers' shares plus what the trainer keeps resident on their one GPU; separate, the trainer's state on its
own GPUs, and a pushed transfer's buffers on both sides (config/layout.py says how each is counted)."""

import os
import subprocess
import sys
from pathlib import Path

from prime_rl.config.layout import gpu_fit_problem, gpu_shares, server_push_problem, trainer_fit_problem
from prime_rl.config.schema import Config
from prime_rl.config.user_error import check
from prime_rl.models.size import largest_param, param_count


def check_colocated_gpu(cfg: Config, gpu: str, student: Path) -> None:
    problem = gpu_fit_problem(cfg, gpu_total_bytes(gpu), param_count(student))
    fix = "lower the servers' shares (their KV cache), use lora=on, or a GPU per role with deployment=gpu"
    check(problem is None, [*gpu_shares(cfg), "trainer.lora.enabled"], problem or "", fix)


def check_trainer_gpus(cfg: Config, gpu: str, student: Path) -> None:
    problem = trainer_fit_problem(cfg, gpu_total_bytes(gpu), param_count(student), largest_param(student))
    fix = "give the trainer more GPUs (FSDP shards its state over them) or train an adapter with lora=on"
    check(problem is None, ["deployment.num_train_gpus", "trainer.lora.enabled"], problem or "", fix)


def check_server_push(cfg: Config, gpu: str, student: Path) -> None:
    problem = server_push_problem(cfg, gpu_total_bytes(gpu), largest_param(student))
    fix = "lower inference.gpu_memory_utilization (its KV cache) or use inference.weight_transfer=files"
    check(problem is None, ["inference.gpu_memory_utilization", "inference.weight_transfer"], problem or "", fix)


# the memory CUDA reports to a process that sees only the device: a MIG slice's own where nvidia-smi -i, which
# takes no MIG UUID, would answer for the whole card
TOTAL_PROBE = "import torch; print(torch.cuda.mem_get_info()[1])"


def gpu_total_bytes(gpu: str) -> int:
    """The memory of `gpu` (an index or a GPU or MIG UUID, as CUDA_VISIBLE_DEVICES takes it)."""
    out = subprocess.run(
        [sys.executable, "-c", TOTAL_PROBE],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": gpu},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return int(out.split()[-1])
