"""The orchestrator's turn on the device (colocated layout): the run's device lock, and on one GPU the servers
awake for this turn alone, asleep while the trainer steps."""

from prime_rl.config.layout import is_colocated, on_gpu
from prime_rl.models import student_dir, teacher_dir
from prime_rl.orchestrator.context import Context
from prime_rl.protocol.device_turn import DeviceTurn

WEIGHTS = ["weights"]  # vLLM's sleep-mode tag of a model's weights (beside "kv_cache")


class OrchestratorTurn:
    def __init__(self, ctx: Context):
        cfg = ctx.cfg
        self.turn = DeviceTurn(ctx.run_dir.device_lock, is_colocated(cfg))
        local_teachers = [(t.client, teacher_dir(t.cfg)) for t in ctx.teachers.values() if t.local]
        # each server with the model dir whose weights it moves between host and device: its timeout's size
        self.sleepers = [(ctx.student, student_dir(cfg)), *local_teachers] if is_colocated(cfg) and on_gpu(cfg) else []

    async def __aenter__(self) -> "OrchestratorTurn":
        """The turn, and the servers awake: the student's weights alone, since the turn reloads them next and the
        reload's buffers must not come on top of its KV cache (vLLM's order: weights, reload, KV cache)."""
        await self.turn.__aenter__()
        for k, (server, model_dir) in enumerate(self.sleepers):
            await server.wake_up(model_dir, WEIGHTS if k == 0 else None)  # an awake server (the first turn) stays so
        return self

    async def loaded(self) -> None:
        """After the turn's reload: the student's server wholly awake (its KV cache back) to generate."""
        for server, model_dir in self.sleepers[:1]:
            await server.wake_up(model_dir)

    async def __aexit__(self, *exc) -> None:
        try:
            for server, model_dir in self.sleepers:
                await server.sleep(model_dir)
        finally:
            await self.turn.__aexit__()

    def take_times(self) -> dict[str, float]:
        return self.turn.take_times()
