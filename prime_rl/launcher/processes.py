"""Child processes of a run, one process group each: spawn, watch, and stop the whole group.

Every role runs as the leader of its own session, so everything it starts (a vLLM server's engine core,
a trainer's helpers) shares its process group, and signalling the group reaches all of them. We never
signal only the leader: killing a vLLM server's main process orphans its engine core.
"""

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from prime_rl.launcher.server_factory import ForkedServer, fork_server

if TYPE_CHECKING:  # the reaper imports this module and nothing heavier
    from prime_rl.launcher.plan import Role

KILL_WAIT_S = 3.0  # SIGKILL cannot be ignored; this only covers processes stuck in the kernel


@dataclass(eq=False)  # compared by identity
class Child:
    role: "Role"
    popen: subprocess.Popen | ForkedServer  # a CPU server may be forked by a server factory (server_factory.py)
    stopped: bool = False  # its group has been emptied; never signal this pgid again (it may be reused)

    @property
    def pgid(self) -> int:
        return self.popen.pid  # a session leader's pgid is its pid

    def exit_code(self) -> int | None:
        """The leader's exit code, or None while it runs (also reaps it, so it never lingers as a zombie)."""
        return self.popen.poll()

    def group_alive(self) -> bool:
        self.exit_code()
        return group_alive(self.pgid)

    def listening_ports(self) -> list[int]:
        """TCP ports the leader listens on: a server started with `--port 0` listens on one the kernel picked."""
        try:
            connections = psutil.Process(self.pgid).net_connections(kind="tcp")
        except psutil.Error:  # exited, or not yet readable
            return []
        return [c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN]

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)


# Every process of a run carries this (inherited by whatever it starts): found by it, a descendant that left
# its role's process group (wandb's service starts a session of its own) is still stopped with the run.
RUN_ENV = "PRIME_RL_RUN_DIR"
# Not passed on: with it, the trainer would log into the W&B service of whatever process launched us (a notebook,
# a test) instead of its own, and a resumed trainer would find its run id still held there ("run ID is in use").
NOT_INHERITED = {"WANDB_SERVICE"}


def spawn(role: "Role", extra_env: dict[str, str]) -> Child:
    """Start a role in its own session, output appended to its log, environment = ours + the role's +
    `extra_env` (the run marker, and the server key: given here, so no plan, log or config ever holds it). A CPU
    server is forked by the server factory the environment names, where there is one that can."""
    role.log_file.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED | set(role.withheld)} | role.env | extra_env
    with open(role.log_file, "ab") as log:
        # A header per start, so a log appended to across restarts shows where each attempt begins.
        header = f"=== {datetime.now():%Y-%m-%d %H:%M:%S} launcher starts {role.name}: {' '.join(role.command)}\n"
        log.write(header.encode())
        log.flush()
        popen = fork_server(role.command, env, log) or subprocess.Popen(
            role.command,
            env=env,
            stdin=subprocess.DEVNULL,  # no child may read the launcher's terminal
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    return Child(role, popen)


def group_alive(pgid: int) -> bool:
    """Whether any live process is left in the group (the leader may have exited leaving members behind)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(_group_of(p) == pgid for p in live_processes([]))


def live_processes(attrs: list[str]) -> Iterator[psutil.Process]:
    """Every process but this one and the dead: a member orphaned by its parent stays a zombie in its group until
    init reaps it, and the init of many containers never does, so killpg(pgid, 0) keeps succeeding; zombies hold
    no resources. psutil skips what exits while it looks, and gives None for what is not ours to read."""
    for p in psutil.process_iter([*attrs, "status"], ad_value=None):
        if p.pid != os.getpid() and p.info["status"] not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            yield p


def _group_of(p: psutil.Process) -> int | None:
    try:
        return os.getpgid(p.pid)
    except ProcessLookupError:
        return None  # exited since


def stop_children(
    children: list[Child],
    grace_s: float,
    hurry: Callable[[], bool] = lambda: False,
    say: Callable[[str], None] = lambda _: None,
) -> None:
    """SIGTERM every group, wait up to grace_s for all to be empty, then SIGKILL what is left.

    All groups share one grace period, so stopping takes grace_s, not grace_s per role. `hurry()` turning
    true (a second Ctrl-C) skips the rest of the grace period. Idempotent: stopped groups are skipped.
    """
    running = [c for c in children if not c.stopped and c.group_alive()]
    for c in children:
        c.stopped = c.stopped or c not in running
    if not running:
        return
    say(f"stopping {', '.join(c.role.name for c in running)} (SIGTERM, SIGKILL after {grace_s:g} s)")
    for c in running:
        c.signal_group(signal.SIGTERM)
        c.signal_group(signal.SIGCONT)  # a stopped process (SIGSTOP, ^Z) acts on SIGTERM only once continued
    left = _wait_empty(running, grace_s, hurry)
    if left:
        say(f"SIGKILL {', '.join(c.role.name for c in left)} (still running after SIGTERM)")
        for c in left:
            c.signal_group(signal.SIGKILL)
        for c in _wait_empty(left, KILL_WAIT_S, lambda: False):
            say(f"warning: process group {c.pgid} of {c.role.name} survived SIGKILL")


def marked_processes(marker: str) -> list[int]:
    """Live processes (not this one) whose environment has RUN_ENV=marker."""
    return [p.pid for p in live_processes(["environ"]) if (p.info["environ"] or {}).get(RUN_ENV) == marker]


def stop_stragglers(marker: str, grace_s: float, say: Callable[[str], None] = lambda _: None) -> None:
    """SIGTERM, then after grace_s SIGKILL, every process still carrying the run's marker."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        pids = marked_processes(marker)
        if not pids:
            return
        say(f"{signal.Signals(sig).name} {len(pids)} process(es) of the run outside its process groups: {pids}")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while marked_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.1)


def _wait_empty(children: list[Child], timeout_s: float, hurry: Callable[[], bool]) -> list[Child]:
    """Wait until each group is empty; the ones that are not when time runs out (or hurry() is true)."""
    deadline = time.monotonic() + timeout_s
    left = list(children)
    while True:
        for c in left:
            c.stopped = not c.group_alive()
        left = [c for c in left if not c.stopped]
        if not left or time.monotonic() >= deadline or hurry():
            return left
        time.sleep(0.1)


def log_tail(path: Path, lines: int = 20) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 64 * 1024))  # logs can be large; the tail is at the end
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]
