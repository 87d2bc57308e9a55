"""A mix whose sources train with different modes (task.mix[i].mode): each prompt of a step goes to its source's
mode, the modes make their groups concurrently, and the groups come back in the prompts' order; each mode's teacher
signal goes to its own samples (a mode with none in a step is not asked). A metric that two modes both report is
their mean, weighted by their prompts (samples, for the teacher signal)."""

import asyncio

from prime_rl.config.modes import example_mode
from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.context import Context
from prime_rl.orchestrator.rollouts import weighted_means
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example


class PerSource(Algorithm):
    def __init__(self, parts: dict[str, Algorithm]):
        self.parts = parts  # by mode name: each of the run's modes' part

    async def preflight(self, ctx: Context) -> None:
        for algo in self.parts.values():
            await algo.preflight(ctx)

    async def rollouts(self, ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], dict[str, float]]:
        modes = [example_mode(ctx.cfg, ex).name for ex in examples]
        shares = {mode: [ex for ex, m in zip(examples, modes) if m == mode] for mode in dict.fromkeys(modes)}
        made = await asyncio.gather(*(self.parts[mode].rollouts(ctx, share) for mode, share in shares.items()))
        each = {mode: iter(groups) for mode, (groups, _) in zip(shares, made)}
        weighed = [(metrics, len(share)) for share, (_, metrics) in zip(shares.values(), made)]
        return [next(each[mode]) for mode in modes], weighted_means(weighed)

    async def teacher_signal(self, ctx: Context, samples: list[Sample]) -> dict[str, float]:
        shares = {mode: [s for s in samples if s.mode == mode] for mode in dict.fromkeys(s.mode for s in samples)}
        signals = await asyncio.gather(*(self.parts[mode].teacher_signal(ctx, share) for mode, share in shares.items()))
        return weighted_means([(signal, len(share)) for signal, share in zip(signals, shares.values())])

    async def scorer_level(self, ctx: Context) -> dict[str, float]:
        levels = await asyncio.gather(*(algo.scorer_level(ctx) for algo in self.parts.values()))
        return {k: v for level in levels for k, v in level.items()}

    def resume(self, ctx: Context, start: int) -> None:
        for algo in self.parts.values():
            algo.resume(ctx, start)
