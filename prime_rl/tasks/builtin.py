"""Built-in string tasks, generated deterministically from a seed; train and eval never share a prompt."""

import random
import string
from collections.abc import Callable

from prime_rl.config.schema import TaskConfig
from prime_rl.tasks.task import Example, Task
from prime_rl.tasks.verifiers import make_verifier


def _words(seed: int, count: int, min_len: int = 3, max_len: int = 8) -> list[str]:
    rng = random.Random(seed)
    seen, words = set(), []
    while len(words) < count:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(min_len, max_len)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def _split(cfg: TaskConfig, make: Callable[[str], Example], name: str) -> Task:
    words = _words(cfg.seed, cfg.num_train + cfg.num_eval)
    examples = [make(w) for w in words]
    return Task(name, examples[: cfg.num_train], examples[cfg.num_train :], make_verifier(cfg))


def reverse_task(cfg: TaskConfig) -> Task:
    """`reverse: abcde` -> `edcba`."""
    return _split(cfg, lambda w: Example(f"reverse: {w}", w[::-1], cfg.system_prompt), "reverse")


def sort_task(cfg: TaskConfig) -> Task:
    """`sort: dbca` -> `abcd` (an easy smoke task: it saturates quickly)."""
    return _split(cfg, lambda w: Example(f"sort: {w}", "".join(sorted(w)), cfg.system_prompt), "sort")


BUILTIN_TASKS: dict[str, Callable[[TaskConfig], Task]] = {"reverse": reverse_task, "sort": sort_task}
