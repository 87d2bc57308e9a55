"""Verifiers: a completion and its example in, a reward out (1.0 = right). `task.verifier` names one of these, or
a function of yours as `<module>:<function>` taking (completion, answer) and returning a float or a bool;
reasoning-gym tasks use the dataset's own `score_answer`."""

import difflib
import functools
import importlib
from collections.abc import Callable

from prime_rl.config.schema import TaskConfig
from prime_rl.config.user_error import UserError


class TaskError(UserError, ValueError):
    """A task that cannot be built as configured: what is wrong, the keys that say so, and the fix."""

    def __init__(self, keys: list[str], problem: str, fix: str):
        self.keys, self.problem, self.fix = keys, problem, fix
        super().__init__(f"{problem} [{', '.join(keys)}]; fix: {fix}")


def similarity(completion: str, answer: str) -> float:
    """Partial credit in [0, 1]: difflib's ratio of matching characters (1.0 = exact)."""
    return difflib.SequenceMatcher(None, completion.strip(), answer).ratio()


def exact(completion: str, answer: str) -> float:
    return float(completion.strip() == answer.strip())


def contains(completion: str, answer: str) -> float:
    return float(answer.strip() in completion)


def math(completion: str, answer: str) -> float:
    """math-verify: the completion's final answer (boxed, or the last expression) equals the reference
    symbolically (1/2 = 0.5 = \\frac{1}{2}; (x+1)^2 = x^2+2x+1)."""
    from math_verify import parse, verify

    return float(verify(parse(answer), parse(completion)))


NAMED: dict[str, Callable[[str, str], float]] = {
    "similarity": similarity,
    "exact": exact,
    "contains": contains,
    "math": math,
}


def answer_verifier(spec: str) -> Callable[[str, str], float]:
    """A named verifier, or `<module>:<function>` imported."""
    if spec in NAMED:
        return NAMED[spec]
    module, _, name = spec.partition(":")
    if not name:
        raise TaskError(
            ["task.verifier"], f"unknown verifier {spec!r}", f"use {' | '.join(NAMED)} or <module>:<function>"
        )
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise TaskError(["task.verifier"], f"cannot import verifier {spec!r}: {e}", "make the module importable") from e
    if not callable(fn):
        raise TaskError(["task.verifier"], f"verifier {spec!r} is not a function", "name a function")
    return fn


def make_verifier(cfg: TaskConfig) -> Callable:
    """(completion, example) -> reward for the task: in the orchestrator's verifier processes and in-process."""
    if cfg.name == "mix":
        from prime_rl.tasks.mix import mix_sources

        return functools.partial(score_source, {label: make_verifier(src) for label, src in mix_sources(cfg)})
    if cfg.name == "verifiers":
        from prime_rl.tasks.verifiers_taskset import make_scorer

        return make_scorer(cfg)
    if cfg.name == "reasoning_gym":
        import reasoning_gym

        return functools.partial(score_entry, reasoning_gym.get_score_answer_fn(cfg.dataset))
    return functools.partial(score_answer, answer_verifier(cfg.verifier))


def score_answer(fn: Callable[[str, str], float], completion: str, example) -> float:
    return float(fn(completion, example.answer))


def score_entry(fn: Callable, completion: str, example) -> float:
    return float(fn(answer=completion, entry=example.entry))


def score_source(verifiers: dict[str, Callable], completion: str, example) -> float:
    return verifiers[example.source](completion, example)
