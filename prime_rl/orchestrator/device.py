"""The orchestrator's turn on the device (colocated layout): the run's device lock, and on one GPU the servers
awake for this turn alone, asleep while the trainer steps."""

from prime_rl.config.layout import is_colocated, on_gpu
from prime_rl.orchestrator.context import Context
from prime_rl.protocol.device_turn import DeviceTurn


class OrchestratorTurn:
    def __init__(self, ctx: Context):
        cfg = ctx.cfg
        self.turn = DeviceTurn(ctx.run_dir.device_lock, is_colocated(cfg))
        local_teachers = [t.client for t in ctx.teachers.values() if t.local]
        self.sleepers = [ctx.student, *local_teachers] if is_colocated(cfg) and on_gpu(cfg) else []

    async def __aenter__(self) -> "OrchestratorTurn":
        await self.turn.__aenter__()
        for server in self.sleepers:
            await server.wake_up()  # a server that is awake (the first turn) stays so
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            for server in self.sleepers:
                await server.sleep()
        finally:
            await self.turn.__aexit__()

    def take_times(self) -> dict[str, float]:
        return self.turn.take_times()
