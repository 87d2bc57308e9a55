"""`trainer.dtype=auto` and `inference.dtype=auto` on a CPU, resolved once per job on the node that runs it, so the
servers and the trainer agree (docs/off_policy.md, "bf16 on a CPU"): bfloat16 where the CPU computes it natively
(avx512_bf16 or AMX) and the student is large enough for it to pay, float32 elsewhere. On GPUs auto stays auto and
means bfloat16 (config/layout.py server_dtype, trainer/model.py compute_dtype)."""

from dataclasses import replace
from pathlib import Path

from prime_rl.config.layout import on_gpu
from prime_rl.config.schema import Config
from prime_rl.models import student_dir

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo's names of native bf16 arithmetic
# BENCHMARKS §11 (a CPU with avx512_bf16, float32 against bf16 at each size): 0.67x the steps/min at 0.38 M, where
# oneDNN's bf16 kernels cost more than they save on tiny matrices, then 1.20x at 1.8 M, 1.40x at 4.1 M, 1.79x at
# 13 M and 1.71x at 48 M: the flip lies below 1.8 M, the smallest size measured to pay
BF16_MIN_PARAMS = 1_500_000


def cpu_bf16_flag(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The first of BF16_CPU_FLAGS this CPU has, or None."""
    try:
        flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
    except (OSError, StopIteration):
        return None
    return next((flag for flag in BF16_CPU_FLAGS if flag in flags), None)


def auto_cpu_dtype(flag: str | None, params: int | None) -> tuple[str, str]:
    """(the dtype auto means on this CPU, why) for a student of `params` parameters (None: not built yet)."""
    if flag is None:
        return "float32", f"this CPU has no native bf16 ({' or '.join(BF16_CPU_FLAGS)})"
    if params is None:
        return "float32", "the student's size is unknown (not built yet, or a config transformers does not read)"
    if params < BF16_MIN_PARAMS:
        return "float32", f"{flag}, but {params / 1e6:.2f} M parameters < {BF16_MIN_PARAMS / 1e6:.1f} M: bf16 is slower"
    return "bfloat16", f"{flag} and {params / 1e6:.1f} M parameters >= {BF16_MIN_PARAMS / 1e6:.1f} M"


def with_auto_dtypes(cfg: Config) -> tuple[Config, str]:
    """`cfg` with a CPU job's auto dtypes resolved, and a line saying what auto chose and why ("" if nothing was
    auto, or on GPUs)."""
    auto = {k for k, v in (("trainer", cfg.trainer.dtype), ("inference", cfg.inference.dtype)) if v == "auto"}
    if not auto or on_gpu(cfg):
        return cfg, ""
    flag = cpu_bf16_flag()
    dtype, why = auto_cpu_dtype(flag, student_params(cfg) if flag else None)
    if "trainer" in auto:
        cfg = replace(cfg, trainer=replace(cfg.trainer, dtype=dtype))
    if "inference" in auto:
        cfg = replace(cfg, inference=replace(cfg.inference, dtype=dtype))
    return cfg, f"{' and '.join(sorted(auto))} dtype auto: {dtype} ({why})"


def student_params(cfg: Config) -> int | None:
    from prime_rl.models.size import param_count  # imports transformers: only where the CPU could compute bf16

    model = student_dir(cfg)
    if not (model / "config.json").exists():
        return None
    try:
        return param_count(model)
    except (ValueError, OSError):  # an architecture transformers lacks: the servers and the trainer will say so
        return None
