"""A real vLLM server for tests, started exactly as the launcher starts one (same command, process group)."""

import contextlib
import time
from pathlib import Path

import httpx

from prime_rl.config.schema import Config
from prime_rl.inference.server import vllm_command
from prime_rl.launcher.plan import Role, free_port
from prime_rl.launcher.processes import log_tail, spawn, stop_children


@contextlib.contextmanager
def serve(model: Path, log_dir: Path, served_name: str = "student", lora_rank: int = 0, extra_args=()):
    """Yields the base URL of a ready server; stops its whole process group afterwards."""
    cfg = Config()
    cfg.inference.extra_args = list(extra_args)
    port = free_port(set())
    command, env = vllm_command(cfg, model, served_name, port, gpus=[], lora_rank=lora_rank)
    log = log_dir / f"vllm-{served_name}-{port}.log"
    role = Role(name=served_name, command=command, env=env, gpus=[], log_file=log, config_file=log, port=port)
    child = spawn(role, {})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while not _healthy(url):
            if child.exit_code() is not None or time.monotonic() > deadline:
                raise RuntimeError("vLLM did not start:\n" + "\n".join(log_tail(log, 40)))
            time.sleep(0.5)
        yield url
    finally:
        stop_children([child], grace_s=5)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
