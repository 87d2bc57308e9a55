"""rl: the student samples the rollouts (replies, or episodes where the task has an environment); the task's rewards
and GRPO advantages are the whole signal."""

from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.context import Context, student_sampling
from prime_rl.orchestrator.rollouts import by_rollouts, student_rollouts
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example


class RL(Algorithm):
    async def rollouts(self, ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], dict[str, float]]:
        sampling = student_sampling(ctx)
        return await by_rollouts(ctx, examples, lambda share, n: student_rollouts(ctx, share, n, sampling))
