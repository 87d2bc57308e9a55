"""Where the run's own servers listen. On one node a server binds a port of the kernel's choosing, so no other
process can take it between choice and bind; the launcher reads the port back and publishes the server's URL
in the run dir once it serves (RunDir.server_url). Multi-node plans and explicit ports put the URLs in the config.
The orchestrator finds every server here, the trainer that pushes weights the student's."""

from dataclasses import replace

from prime_rl.config.schema import Config
from prime_rl.config.teachers import local_teachers, server_role, teacher_config, with_teacher
from prime_rl.inference.client import InferenceError
from prime_rl.protocol.polling import wait_until_async
from prime_rl.protocol.run_dir import RunDir
from prime_rl.protocol.servers import STUDENT_ROLE

POLL_S = 0.5


async def locate_servers(cfg: Config) -> Config:
    """`cfg` with the URLs of the student's servers (inference.urls) and of each local teacher's server."""
    run_dir, timeout = RunDir(cfg.run_dir), cfg.launcher.ready_timeout_s
    cfg = replace(cfg, inference=replace(cfg.inference, urls=await student_urls(cfg)))
    for name in local_teachers(cfg):
        teacher = teacher_config(cfg, name)
        if not teacher.base_url and not teacher.port:
            url = await published_url(run_dir, server_role(name), timeout)
            cfg = with_teacher(cfg, name, replace(teacher, base_url=url))
    return cfg


async def student_urls(cfg: Config) -> list[str]:
    """The student servers' API URLs: those the config names, or the one the launcher publishes once it serves."""
    return configured_student_urls(cfg) or [
        await published_url(RunDir(cfg.run_dir), STUDENT_ROLE, cfg.launcher.ready_timeout_s)
    ]


def configured_student_urls(cfg: Config) -> list[str]:
    """The student servers' API URLs the config names: a multi-node job's (one per inference node), a fixed port's;
    none for a server on a port of the kernel's choosing."""
    inference = cfg.inference
    if inference.urls:
        return list(inference.urls)
    return [f"http://{inference.host}:{inference.port}/v1"] if inference.port else []


async def published_url(run_dir: RunDir, role: str, timeout_s: float) -> str:
    """The URL the launcher published for the `role` server, waiting for it up to timeout_s."""
    path = run_dir.server_url(role)
    error = InferenceError(f"no {role} server published in {path} within {timeout_s:g} s")
    await wait_until_async(path.exists, timeout_s, POLL_S, lambda: error)
    return path.read_text().strip()
