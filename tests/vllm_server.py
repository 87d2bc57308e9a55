"""A real vLLM server for tests, started exactly as the launcher starts one (same command, process group)."""

import contextlib
import time
from pathlib import Path

import httpx

from prime_rl.config.schema import Config, WeightTransfer
from prime_rl.inference.server import vllm_command
from prime_rl.launcher.allocator import preload_env
from prime_rl.launcher.plan import Role
from prime_rl.launcher.processes import log_tail, spawn, stop_children


@contextlib.contextmanager
def serve(
    model: Path,
    log_dir: Path,
    served_name: str = "student",
    lora_rank: int = 0,
    extra_args=(),
    student: bool = True,
    weight_transfer: WeightTransfer = WeightTransfer.files,
    env: dict[str, str] | None = None,
):
    """Yields the base URL of a ready server (the student's, or with student=False a teacher's); stops its whole
    process group afterwards. `env`: what the launcher adds at spawn (the run's server key)."""
    cfg = Config()
    cfg.inference.weight_transfer = weight_transfer
    if student:
        cfg.inference.extra_args = list(extra_args)
    else:
        cfg.teacher.extra_args = list(extra_args)
    command, server_env = vllm_command(cfg, model, served_name, 0, gpus=[], lora_rank=lora_rank, student=student)
    server_env |= preload_env(cfg.launcher.tcmalloc)
    log = log_dir / f"vllm-{served_name}-{time.monotonic_ns()}.log"
    role = Role(name=served_name, command=command, env=server_env, gpus=[], log_file=log, config_file=log, port=0)
    child = spawn(role, env or {})
    try:
        deadline = time.monotonic() + 300
        while not (url := _healthy_url(child)):
            if child.exit_code() is not None or time.monotonic() > deadline:
                raise RuntimeError("vLLM did not start:\n" + "\n".join(log_tail(log, 40)))
            time.sleep(0.5)
        yield url
    finally:
        stop_children([child], grace_s=5)


def _healthy_url(child) -> str | None:
    """The server's root once it answers /health on the port it bound (the launcher reads it back the same way)."""
    for port in child.listening_ports():
        url = f"http://127.0.0.1:{port}"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
    return None
