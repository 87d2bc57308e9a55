"""Which prompts a step trains on."""

import random

from prime_rl.config.schema import Config
from prime_rl.tasks import Example, Task


def prompts_per_step(cfg: Config) -> int:
    return cfg.orchestrator.batch_size // cfg.orchestrator.rollouts_per_example


def step_prompts(cfg: Config, task: Task, step: int, waiting: list[Example] = ()) -> list[Example]:
    """The step's prompts, none of `waiting` (the difficulty filter's): a deterministic function of (seed, step)
    and of them, so a resumed run sees the same data."""
    return task.draw(random.Random(cfg.seed * 1_000_003 + step), prompts_per_step(cfg), waiting)


def refill_prompts(cfg: Config, task: Task, step: int, refill: int, drawn: list[Example], n: int) -> list[Example]:
    """n more of the step's prompts for its refill round `refill` (dynamic sampling), none of `drawn` (what it
    drew already, and the prompts the difficulty filter holds back): a function of (seed, step, round) as well, so
    a resumed step draws the same ones."""
    return task.draw(random.Random(f"{cfg.seed}/{step}/refill {refill}"), n, drawn)
