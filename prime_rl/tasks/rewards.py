"""Rewards from a reference answer: a completion and its example in, a reward out (1.0 = right). `task.verifier`
names one of these, or a function of yours as `<module>:<function>` taking (completion, answer) and returning a
float or a bool; reasoning-gym and verifiers tasks score with their own functions instead."""

import difflib
import functools
import importlib
from collections.abc import Callable

from prime_rl.config.judge import JUDGE
from prime_rl.config.schema import TaskConfig
from prime_rl.config.user_error import ConfigError
from prime_rl.tasks.task import Example


def similarity(completion: str, answer: str) -> float:
    """Partial credit in [0, 1]: difflib's ratio of matching characters (1.0 = exact)."""
    return difflib.SequenceMatcher(None, completion.strip(), answer).ratio()


def exact(completion: str, answer: str) -> float:
    return float(completion.strip() == answer.strip())


def contains(completion: str, answer: str) -> float:
    return float(answer.strip() in completion)


def math_equal(completion: str, answer: str) -> float:
    """math-verify: the completion's final answer (boxed, or the last expression) equals the reference
    symbolically (1/2 = 0.5 = \\frac{1}{2}; (x+1)^2 = x^2+2x+1)."""
    from math_verify import parse, verify

    return float(verify(parse(answer), parse(completion)))


NAMED: dict[str, Callable[[str, str], float]] = {
    "similarity": similarity,
    "exact": exact,
    "contains": contains,
    "math": math_equal,
}


def judged(completion: str, answer: str) -> float:
    raise RuntimeError("a judged source's rewards come from the judge's server (prime_rl/judge), not a verifier")


def answer_verifier(spec: str) -> Callable[[str, str], float]:
    """A named verifier, or `<module>:<function>` imported; `judge` is the judge's (the orchestrator asks it)."""
    if spec == JUDGE:
        return judged
    if spec in NAMED:
        return NAMED[spec]
    module, _, name = spec.partition(":")
    if not name:
        raise ConfigError(
            ["task.verifier"], f"unknown verifier {spec!r}", f"use {' | '.join([*NAMED, JUDGE])} or <module>:<function>"
        )
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(
            ["task.verifier"], f"cannot import verifier {spec!r}: {e}", "make the module importable"
        ) from e
    if not callable(fn):
        raise ConfigError(["task.verifier"], f"verifier {spec!r} is not a function", "name a function")
    return fn


def answer_scorer(cfg: TaskConfig) -> Callable[[str, Example], float]:
    """(completion, example) -> the reward task.verifier gives the completion against the example's answer."""
    return functools.partial(score_answer, answer_verifier(cfg.verifier))


def score_answer(fn: Callable[[str, str], float], completion: str, example: Example) -> float:
    return float(fn(completion, example.answer))
