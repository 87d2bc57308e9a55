"""Procedural tasks from reasoning-gym: `task=reasoning_gym task.dataset=<name>` with the generator's options in
`task.options`. Train and eval are generated from different seeds, and train questions that are also eval questions
are dropped (datasets over a finite vocabulary repeat questions); the dataset's own `score_answer` is the verifier."""

import functools
from collections.abc import Callable

from prime_rl.config.extras import import_extra
from prime_rl.config.schema import TaskConfig
from prime_rl.config.user_error import ConfigError
from prime_rl.tasks.task import Example, Task


def load_reasoning_gym_task(cfg: TaskConfig) -> Task:
    evals = generate(cfg, cfg.seed + 1, cfg.num_eval)
    held_out = {ex.prompt for ex in evals}
    train = [ex for ex in generate(cfg, cfg.seed, cfg.num_train) if ex.prompt not in held_out]
    if not train:
        raise ConfigError(
            ["task.num_eval", "task.options"],
            f"every train question of {cfg.dataset} is also an eval question",
            "lower task.num_eval or widen the generator's options",
        )
    return Task(f"reasoning_gym/{cfg.dataset}", train, evals, entry_scorer(cfg))


def generate(cfg: TaskConfig, seed: int, size: int) -> list[Example]:
    reasoning_gym = import_extra("reasoning_gym", "reasoning-gym", "task=reasoning_gym")

    try:
        dataset = reasoning_gym.create_dataset(cfg.dataset, seed=seed, size=size, **cfg.options)
    except Exception as e:  # an unknown name (ValueError), an unknown option (TypeError), a bad value
        raise ConfigError(
            ["task.dataset", "task.options"],
            f"reasoning_gym cannot make {cfg.dataset!r}: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
            "see reasoning_gym's dataset list and the dataset's config fields",
        ) from e
    return [Example(e["question"], str(e["answer"]), cfg.system_prompt, entry=e) for e in dataset]


def entry_scorer(cfg: TaskConfig) -> Callable[[str, Example], float]:
    """(completion, example) -> the dataset's own score_answer of the completion for the example's entry."""
    reasoning_gym = import_extra("reasoning_gym", "reasoning-gym", "task=reasoning_gym")

    return functools.partial(score_entry, reasoning_gym.get_score_answer_fn(cfg.dataset))


def score_entry(fn: Callable, completion: str, example: Example) -> float:
    return float(fn(answer=completion, entry=example.entry))
