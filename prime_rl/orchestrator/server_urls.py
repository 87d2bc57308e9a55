"""Where the run's own servers listen. On one node a server binds a port of the kernel's choosing, so no other
process can take it between choice and bind; the launcher reads the port back and publishes the server's URL
in the run dir once it serves (RunDir.server_url). Multi-node plans and explicit ports put the URLs in the config."""

from dataclasses import replace

from prime_rl.config.schema import Config, TeacherKind
from prime_rl.inference.client import InferenceError
from prime_rl.protocol.polling import wait_until_async
from prime_rl.protocol.run_dir import RunDir

POLL_S = 0.5


async def locate_servers(cfg: Config) -> Config:
    """`cfg` with the URL of each of the run's servers that listens on a port of the kernel's choosing."""
    run_dir, timeout = RunDir(cfg.run_dir), cfg.launcher.ready_timeout_s
    inference, teacher = cfg.inference, cfg.teacher
    if not inference.urls and not inference.port:
        inference = replace(inference, urls=[await published_url(run_dir, "inference", timeout)])
    if teacher.kind == TeacherKind.local_vllm and not teacher.base_url and not teacher.port:
        teacher = replace(teacher, base_url=await published_url(run_dir, "teacher_inference", timeout))
    return replace(cfg, inference=inference, teacher=teacher)


async def published_url(run_dir: RunDir, role: str, timeout_s: float) -> str:
    """The URL the launcher published for the `role` server, waiting for it up to timeout_s."""
    path = run_dir.server_url(role)
    error = InferenceError(f"no {role} server published in {path} within {timeout_s:g} s")
    await wait_until_async(path.exists, timeout_s, POLL_S, lambda: error)
    return path.read_text().strip()
