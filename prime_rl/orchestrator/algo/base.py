"""What a mode's part of an orchestrator step is: where the rollouts come from, what is checked before the first
step, what a teacher adds to the scored samples, and what a resumed run must skip. The loop (orchestrator/loop.py)
runs these in one straight line: rollouts -> rewards and advantages -> teacher signal -> batch."""

from abc import ABC, abstractmethod

from prime_rl.config.modes import Mode
from prime_rl.orchestrator.context import Context
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example


class Algorithm(ABC):
    def __init__(self, mode: Mode, knobs):
        self.mode = mode  # the mode this part is of: a built-in one or a researcher's own
        self.knobs = knobs  # its own knobs, typed (config.modes.mode_config; None for a mode without any)

    async def preflight(self, ctx: Context) -> None:
        """Checks before the first step that only this mode needs (none by default)."""
        return None

    @abstractmethod
    async def rollouts(self, ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], dict[str, float]]:
        """One group of rollouts_per_example samples per prompt, and the metrics of making them."""

    async def teacher_signal(self, ctx: Context, samples: list[Sample]) -> dict[str, float]:
        """What a teacher adds to the step's scored samples (per-token streams), and its metrics."""
        return {}

    async def scorer_level(self, ctx: Context) -> dict[str, float]:
        """At the run's first step, the eval metrics of what this mode distils toward, where a teacher's eval does
        not say it (none by default)."""
        return {}

    def resume(self, ctx: Context, start: int) -> None:
        """A resumed run at `start`: bring what this mode keeps across steps up to that step (nothing by default)."""
        return None
