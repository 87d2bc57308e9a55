"""Standing student servers the suite's runs share (`inference.url`, launcher/standing_server.py): a vLLM server
takes ~30 s to start on two cores, most of a few-step run. A run that does not test its own server's start asks
the pool for the overrides that attach it to one; the pool starts `python -m prime_rl.serve` with the run's own
overrides the first time a server of that recipe is asked for, and keeps it for the session. The recipe is the
server's command line in the launcher's plan (launcher/plan.py build_plan), so two runs share a server only
where the launcher would have started the same one."""

import os
import secrets
import select
import signal
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

from prime_rl.config import compose_config
from prime_rl.launcher.plan import build_plan
from prime_rl.protocol.servers import SERVER_KEY_ENV

MAX_SERVERS = 3  # ~1.3 GB each; the least recently used one stops for a fourth
START_TIMEOUT_S = 600  # the first server of a recipe may build its student first


def recipe(overrides: tuple[str, ...]) -> tuple:
    """What makes two runs' student servers the same: the command line and env of the launcher's plan for it."""
    cfg = compose_config([o for o in overrides if not o.startswith(("hydra.", "+hydra."))])
    server = build_plan(cfg, Path("run"), []).role("inference")  # no run dir is read or written
    return tuple(server.command), tuple(sorted(server.env.items()))


class StandingServers:
    def __init__(self, root: Path):
        self.root = root
        self.key = secrets.token_urlsafe(16)
        self.servers: OrderedDict[tuple, tuple[subprocess.Popen, str]] = OrderedDict()

    def overrides(self, *overrides: str) -> list[str]:
        """The overrides that make a run of `overrides` use a standing server of its recipe (started now if none
        serves); the run's environment must hold the key (`env()`)."""
        key = recipe(overrides)
        if key in self.servers and self.servers[key][0].poll() is not None:  # it died: a new one
            del self.servers[key]
        if key not in self.servers:
            if len(self.servers) >= MAX_SERVERS:
                stop(self.servers.popitem(last=False)[1][0])
            self.servers[key] = self.start(overrides)
        self.servers.move_to_end(key)
        return [f"inference.url={self.servers[key][1]}"]

    def start(self, overrides: tuple[str, ...]) -> tuple[subprocess.Popen, str]:
        run_dir = self.root / f"server{len(os.listdir(self.root))}"
        with open(self.root / f"{run_dir.name}.err", "w") as err:  # the child keeps its own copy of the fd
            proc = subprocess.Popen(
                # --stop-with: a worker that dies without its teardown (killed, crashed) takes its servers along
                [
                    sys.executable,
                    "-m",
                    "prime_rl.serve",
                    *overrides,
                    "--run-dir",
                    str(run_dir),
                    f"--stop-with={os.getpid()}",
                ],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
                env=os.environ | {SERVER_KEY_ENV: self.key},
            )
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline() if ready else ""  # "… serves at <url>; …", or nothing when it failed
        if "serves at" not in line:
            stop(proc)
            raise RuntimeError(f"no standing server for {overrides}: {(self.root / f'{run_dir.name}.err').read_text()}")
        return proc, line.split("serves at ", 1)[1].split(";", 1)[0]

    def stop_all(self) -> None:
        for proc, _ in self.servers.values():
            stop(proc)
        self.servers.clear()

    def env(self) -> dict[str, str]:
        """This process's environment with the servers' key, for a launch that uses one: only there, so no other
        test's processes inherit it."""
        return os.environ | {SERVER_KEY_ENV: self.key}


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM: it stops its server and exits; its whole group is killed if it does not within a minute."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
