"""Which prompts a step trains on."""

import random

from prime_rl.config.schema import Config
from prime_rl.tasks import Example, Task


def step_prompts(cfg: Config, task: Task, step: int) -> list[Example]:
    """The step's prompts: a deterministic function of (seed, step), so a resumed run sees the same data."""
    n = cfg.orchestrator.batch_size // cfg.orchestrator.rollouts_per_example
    return task.draw(random.Random(cfg.seed * 1_000_003 + step), n)
