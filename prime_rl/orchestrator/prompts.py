"""Which prompts a step trains on."""

import random

from prime_rl.config.schema import Config
from prime_rl.tasks import Example, Task


def step_prompts(cfg: Config, task: Task, step: int) -> list[Example]:
    """The step's prompts: a deterministic function of (seed, step), so a resumed run sees the same data."""
    n = cfg.orchestrator.batch_size // cfg.orchestrator.rollouts_per_example
    return task.draw(random.Random(cfg.seed * 1_000_003 + step), n)


def refill_prompts(cfg: Config, task: Task, step: int, refill: int, drawn: list[Example], n: int) -> list[Example]:
    """n more of the step's prompts for its refill round `refill` (dynamic sampling), none it drew already: a
    function of (seed, step, round) as well, so a resumed step draws the same ones."""
    return task.draw(random.Random(f"{cfg.seed}/{step}/refill {refill}"), n, drawn)
