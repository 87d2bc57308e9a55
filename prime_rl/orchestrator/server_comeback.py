"""The orchestrator's side of a server the launcher restarts in place (launcher/server_restarts.py). While the run
dir says the server is down, requests to it wait; the first after it serves again brings it back to what it served
(the student's server: the policy's weights or adapter, through the same load as a step; a teacher serves its model
from its start), and only then does any request reach it. A request that failed because its server went down is
sent again once it serves, once per restart: a failed request kept nothing, so no sample is taken twice."""

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path

from prime_rl.config.layout import restarts_in_place
from prime_rl.config.teachers import server_role
from prime_rl.inference.client import InferenceError
from prime_rl.orchestrator.context import Context
from prime_rl.protocol.servers import STUDENT_ROLE, read_restarts

POLL_S = 0.2
# a request that failed waits this long for the launcher to find its server down (it looks every 0.5 s; a hang is
# found from /health, launcher.server_hang_s)
NOTICE_S = 5.0
RESTORING: ContextVar[bool] = ContextVar("restoring", default=False)  # the restore's own requests go straight on


class ServerComeback:
    def __init__(self, restarts: Path, role: str, wait_s: float, restore: Callable[[], Awaitable[str]] | None = None):
        self.restarts = restarts  # RunDir.server_restarts of the server
        self.role = role
        self.wait_s = wait_s  # longest wait for a restarted server to serve (the launcher's own ready timeout)
        self.restore = restore  # brings the restarted server back to what it served, says what; None: nothing to
        self.restored = 0  # the restarts this orchestrator has brought the server back from
        self.lock = asyncio.Lock()  # one request restores, the others wait for it

    async def ready(self) -> int:
        """Before each request: the server's restarts so far, once it serves after the latest, restored."""
        if RESTORING.get() or read_restarts(self.restarts).count == self.restored:
            return self.restored
        async with self.lock:
            deadline = time.monotonic() + self.wait_s
            while (state := read_restarts(self.restarts)).count != self.restored:
                if state.serving:
                    await self.restore_after(state.count)
                elif time.monotonic() > deadline:
                    raise InferenceError(f"the {self.role} server did not serve within {self.wait_s:g} s of a restart")
                else:
                    await asyncio.sleep(POLL_S)
        return self.restored

    async def restore_after(self, count: int) -> None:
        """Bring the server back after restart `count`; one that went down again meanwhile is waited for again."""
        token = RESTORING.set(True)
        try:
            brought = await self.restore() if self.restore else "its model, from its start"
            self.restored = count
            print(f"the {self.role} server serves again after restart {count}: {brought}", file=sys.stderr, flush=True)
        except InferenceError:
            if read_restarts(self.restarts).count == count:
                raise
        finally:
            RESTORING.reset(token)

    async def came_back(self, since: int) -> bool:
        """After a request failed with no answer from its server: whether the server was restarted since the request
        went (`since`: its restarts then), in which case it now serves, restored, and the request may go again."""
        deadline = time.monotonic() + NOTICE_S
        while read_restarts(self.restarts).count == since and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        if read_restarts(self.restarts).count == since:
            return False
        await self.ready()
        return True


def watch_restarts(ctx: Context, restore_student: Callable[[], Awaitable[str]]) -> None:
    """Give the clients of the run's servers that the launcher restarts in place their comeback."""
    cfg, wait = ctx.cfg, ctx.cfg.launcher.ready_timeout_s
    if restarts_in_place(cfg, student=True):
        ctx.student.comeback = ServerComeback(
            ctx.run_dir.server_restarts(STUDENT_ROLE), STUDENT_ROLE, wait, restore_student
        )
    for name, t in ctx.teachers.items():
        if t.local and restarts_in_place(cfg, student=False):
            role = server_role(name)
            t.client.comeback = ServerComeback(ctx.run_dir.server_restarts(role), role, wait)


def restart_metrics(ctx: Context) -> dict[str, int]:
    """restarts/<role>: how often each of the run's servers was restarted in place so far (once it was)."""
    clients = {STUDENT_ROLE: ctx.student} | {server_role(name): t.client for name, t in ctx.teachers.items()}
    counts = {role: read_restarts(c.comeback.restarts).count for role, c in clients.items() if c.comeback}
    return {f"restarts/{role}": count for role, count in counts.items() if count}
