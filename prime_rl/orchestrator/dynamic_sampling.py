"""What a step trains on when some of its groups carry no signal: DAPO's dynamic sampling
(orchestrator.dynamic_sampling).

In rl a group whose rewards are all equal (every sample exact, or every one wrong) has zero advantage in every
sample: it teaches nothing and still fills the batch. Every step counts such groups (`groups/*`, with or without the
filter). With the filter on, the step drops them and samples new prompts for their places, in at most
`max_refills` rounds (each of the prompts the step still misses, scaled by the share of groups kept so far), then
fills what is still missing with the dropped groups, so every batch has its configured size. The refill prompts are
a function of (seed, step, round), like the step's own (orchestrator/prompts.py). Only rl filters: in opd a group
of equal rewards still carries the teacher's per-token signal (config/rules/ refuses the filter elsewhere).
"""

import math
import time
from collections.abc import Awaitable, Callable

from prime_rl.config.schema import Config
from prime_rl.orchestrator.prompts import refill_prompts
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example, Task

Groups = list[list[Sample]]
ZERO_ADVANTAGE = 1e-9  # equal rewards leave float noise in an advantage (a mean of 0.1s is not exactly 0.1)
MIN_KEEP_RATE = 0.25  # the smallest share of kept groups a refill plans with (it would draw 4x what it misses)


def uniform(group: list[Sample]) -> bool:
    """Zero advantage in every sample: the group's rewards (with any length penalty) are all equal."""
    return all(abs(s.advantage) < ZERO_ADVANTAGE for s in group)


def group_metrics(groups: Groups) -> dict[str, float]:
    """The shares of the step's groups that carry no reward signal: all equal, all exact (1), all zero."""
    return {
        "groups/uniform": sum(map(uniform, groups)) / len(groups),
        "groups/all_exact": sum(all(s.reward == 1.0 for s in g) for g in groups) / len(groups),
        "groups/all_zero": sum(all(s.reward == 0.0 for s in g) for g in groups) / len(groups),
    }


async def refill(
    cfg: Config,
    task: Task,
    step: int,
    examples: list[Example],
    groups: Groups,
    scored_rollouts: Callable[[list[Example]], Awaitable[Groups]],
    waiting: list[Example] = (),
) -> tuple[Groups, dict[str, float]]:
    """The step's groups with every uniform one replaced by a group of a new prompt where the refills found one;
    `scored_rollouts` samples and scores (rewards, advantages) the groups of new prompts; `waiting`: prompts the
    difficulty filter holds back, never drawn."""
    start, target = time.monotonic(), len(groups)
    kept, dropped = [g for g in groups if not uniform(g)], [g for g in groups if uniform(g)]
    drawn, tried = list(examples), len(groups)
    for round_ in range(1, cfg.orchestrator.dynamic_sampling.max_refills + 1):
        missing = target - len(kept)
        if missing <= 0:
            break
        keep_rate = max(len(kept) / tried, MIN_KEEP_RATE)
        more = refill_prompts(
            cfg, task, step, round_, drawn + list(waiting), min(math.ceil(missing / keep_rate), target)
        )
        if not more:  # the task has no prompt left that the step did not draw
            break
        new = await scored_rollouts(more)
        drawn += more
        tried += len(new)
        kept += [g for g in new if not uniform(g)]
        dropped += [g for g in new if uniform(g)]
    unfilled = max(target - len(kept), 0)
    return kept[:target] + dropped[:unfilled], {
        "sampling/filtered": len(dropped) / tried,  # of every group the step sampled, the uniform ones
        "sampling/extra_prompts": float(len(drawn) - len(examples)),
        "sampling/unfilled": unfilled / target,  # places still holding a uniform group after every refill
        "time/refill": time.monotonic() - start,
    }
