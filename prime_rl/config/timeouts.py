"""The timeouts that must grow with the model and the run. Defaults that fit the built-in model on a CPU would
fail an 8 B student on GPUs: a request of 4 k-token completions outlives 120 s, a 32 B teacher read from a network
filesystem is not ready in 300 s, and the other trainer ranks wait in a collective while rank 0 writes an export.
Each knob is 0 for `auto`, resolved here from what the work needs at a planning rate slower than the machines the
run should meet: auto should not cut a healthy run short, and still ends a hung one."""

from dataclasses import replace
from pathlib import Path

from prime_rl.config.schema import Config

REQUEST_BASE_S = 120.0  # a request's fixed share: queueing behind the step's other requests, a reload; a load's own
DECODE_TOKENS_PER_S = 10.0  # the slowest per-sequence decoding planned for (a busy server, a large model)
READY_BASE_S = 300.0  # a server's start without its weights: imports, the engine, profiling, CUDA graphs
LOAD_BYTES_PER_S = 100e6  # the slowest weight read planned for (a network filesystem)
COLLECTIVE_BASE_S = 1800.0  # torch's own default for a gloo collective (NCCL's is 10 min)
WRITE_BYTES_PER_S = 100e6  # the slowest write planned for (one rank, a network filesystem)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


def student_request_timeout_s(cfg: Config) -> float:
    """orchestrator.request_timeout_s, or auto: a request holds samples decoded side by side, each up to
    sampling.max_tokens long."""
    return cfg.orchestrator.request_timeout_s or _decode_s(cfg.orchestrator.sampling.max_tokens)


def teacher_request_timeout_s(cfg: Config) -> float:
    """teacher.request_timeout_s, or auto from the longest answer the teacher may write (sft; opd's scoring
    requests, a prefill, take far less)."""
    t = cfg.teacher
    return t.request_timeout_s or _decode_s(t.max_tokens or cfg.orchestrator.sampling.max_tokens)


def _decode_s(max_tokens: int) -> float:
    return REQUEST_BASE_S + max_tokens / DECODE_TOKENS_PER_S


def with_ready_timeout(cfg: Config, model_dirs: list[Path]) -> Config:
    """`cfg` with launcher.ready_timeout_s resolved, once by the launcher for every process: auto counts the
    weights the servers read from `model_dirs`."""
    if cfg.launcher.ready_timeout_s:
        return cfg
    timeout = READY_BASE_S + sum(map(weight_bytes, model_dirs)) / LOAD_BYTES_PER_S
    return replace(cfg, launcher=replace(cfg.launcher, ready_timeout_s=round(timeout)))


def load_timeout_s(weights_dir: Path) -> float:
    """A server's reload, adapter load, sleep or wake of the weights in `weights_dir`: their bytes moved at the
    planning read rate, not the generation requests' timeout, which a large model's reload outlives."""
    return REQUEST_BASE_S + weight_bytes(weights_dir) / LOAD_BYTES_PER_S


def weight_bytes(model_dir: Path) -> int:
    """Bytes of the weight files in a model dir (0 if it does not exist yet)."""
    if not model_dir.is_dir():
        return 0
    return sum(f.stat().st_size for f in model_dir.iterdir() if f.suffix in WEIGHT_SUFFIXES)


def collective_timeout_s(cfg: Config, params: int, bytes_per_param: int) -> float:
    """trainer.collective_timeout_s, or auto: the other ranks wait in a collective while rank 0 alone writes
    `bytes_per_param` per parameter of the student's `params`."""
    return cfg.trainer.collective_timeout_s or COLLECTIVE_BASE_S + params * bytes_per_param / WRITE_BYTES_PER_S
