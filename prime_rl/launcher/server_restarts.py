"""A server of this node that dies or hangs, restarted in place (launcher.server_restarts; which servers may be:
config/layout.py restarts_in_place): its process group killed, the same command started again on the same port with
the same key, its log appended under a header of its own; once it serves again the run dir says so
(RunDir.server_restarts), and the orchestrator, which waited meanwhile, brings it back to the policy before any
request reaches it (orchestrator/server_comeback.py). A server hangs when its /health goes unanswered for
launcher.server_hang_s (watched from a thread: health_watch.py)."""

import math
import time
from collections.abc import Callable
from dataclasses import replace

import httpx

from prime_rl.config.layout import restarts_in_place
from prime_rl.launcher.health_watch import PROBE_S, HealthWatch
from prime_rl.launcher.plan import Plan, Role
from prime_rl.launcher.processes import Child, stop_children
from prime_rl.protocol.run_dir import RunDir
from prime_rl.protocol.servers import STUDENT_ROLE, Restarts, serves, write_restarts


class ServerRestarts:
    def __init__(self, plan: Plan, say: Callable[[str], None]):
        self.plan, self.say = plan, say
        launcher = plan.config.launcher
        self.budget, self.hang_s = launcher.server_restarts, launcher.server_hang_s
        self.strikes = math.ceil(self.hang_s / PROBE_S) if self.hang_s else 0  # probes missed that make a hang
        self.roots: dict[str, str] = {}  # by role: where each server that has served listens
        self.counts: dict[str, int] = {}  # by role: its restarts so far
        self.pending: dict[str, tuple[Child, float]] = {}  # by role: restarted, not serving yet; since when
        self.health = HealthWatch("own-servers")

    def serving(self, child: Child, root: str) -> None:
        """`child`'s server serves at `root`: from now on a death or a hang may restart it."""
        self.roots[child.role.name] = root
        if self.strikes:
            self.health.add(child.role.name, root)

    def hung(self, child: Child) -> bool:
        return bool(self.strikes) and self.health.missed_in_a_row(child.role.name) >= self.strikes

    def hang(self) -> str:
        return f"hung (no answer to /health for {self.hang_s:g} s)"

    def may_restart(self, role: Role) -> bool:
        """Whether the server is one to restart in place, has served (one that never did would fail again), and has
        restarts left."""
        ours = restarts_in_place(self.plan.config, student=role.name == STUDENT_ROLE)
        return ours and role.name in self.roots and self.counts.get(role.name, 0) < self.budget

    def restart(self, child: Child, why: str, spawn: Callable[[Role], Child]) -> Child:
        """Kill what is left of `child`'s process group and start its role again (`spawn`) on the port it served on;
        the orchestrator is told first, so that it waits instead of failing."""
        name = child.role.name
        count = self.counts[name] = self.counts.get(name, 0) + 1
        write_restarts(RunDir(self.plan.run_dir).server_restarts(name), Restarts(count, serving=False))
        self.say(f"{name} {why}; restarting it in place (restart {count} of {self.budget})")
        self.health.drop(name)
        stop_children([child], grace_s=0)  # dead or hung: nothing to wait for
        self.pending[name] = (spawn(on_port(child.role, self.roots[name])), time.monotonic())
        return self.pending[name][0]

    def poll(self, http: httpx.Client, timeout_s: float) -> Child | None:
        """Mark each restarted server that serves again (for the orchestrator and the hang watch); one not serving
        within `timeout_s` of its restart."""
        for name, (child, since) in list(self.pending.items()):
            if serves(http, self.roots[name]):
                del self.pending[name]
                count, took = self.counts[name], time.monotonic() - since
                write_restarts(RunDir(self.plan.run_dir).server_restarts(name), Restarts(count, serving=True))
                self.say(f"{name} serves again after {took:.1f} s (restart {count} of {self.budget})")
                self.serving(child, self.roots[name])
            elif time.monotonic() - since > timeout_s:
                return child
        return None

    def after(self, role: Role) -> str:
        """What a failure's line adds about the server's restarts."""
        count = self.counts.get(role.name, 0)
        return f" after {count} restart{'s' * (count > 1)} in place" if count else ""

    def stop(self) -> None:
        self.health.stop()


def on_port(role: Role, root: str) -> Role:
    """`role` bound to the port of `root` (a server first started on a port of the kernel's choosing is started
    again on the one it had: the orchestrator knows its address)."""
    port = int(root.rsplit(":", 1)[1])
    at = role.command.index("--port")
    return replace(role, port=port, command=[*role.command[: at + 1], str(port), *role.command[at + 2 :]])
