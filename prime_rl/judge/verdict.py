"""A judge's reply to a reward in [0, 1]: a score on a stated scale written in its reply, or, for a yes/no
question, the probability of "yes" among its first token's top logprobs. A reply neither reads as gives None:
the caller counts it and the sample gets no reward (never a crash, never a guess)."""

import math
import re
from collections.abc import Mapping

SCORE = re.compile(r"(?<![\w.-])(\d+(?:\.\d+)?)(?:\s*/\s*(\d+(?:\.\d+)?))?")
THINK = re.compile(r"^\s*<think>.*?</think>", re.S)
YES, NO = "yes", "no"


def rubric_prompt(rubric: str, prompt: str, completion: str, answer: str | None) -> str:
    """The judge's user message: the rubric with the task's prompt, the completion and the reference answer filled
    in (a rubric without {completion} is refused before the run starts)."""
    return rubric.format(prompt=prompt, completion=completion, answer=answer if answer is not None else "")


def score_reward(reply: str, scale: float) -> float | None:
    """The first number of the reply after its reasoning, on [0, scale] (a "7/10" is read on its own scale),
    mapped to [0, 1]; None when there is none or it lies outside its scale (a negative number among them)."""
    found = SCORE.search(THINK.sub("", reply))
    if found is None:
        return None
    value, out_of = float(found.group(1)), float(found.group(2)) if found.group(2) else scale
    if out_of <= 0 or not 0 <= value <= out_of:
        return None
    return value / out_of


def yes_no_reward(top_logprobs: Mapping[str, float]) -> float | None:
    """P(yes) / (P(yes) + P(no)) over the first reply token's top logprobs: a token that begins one of the words
    ("Yes", " yes", "y": a character-level tokenizer's), compared without case or surrounding space, counts for
    it; None when no token does."""
    mass = {YES: 0.0, NO: 0.0}
    for token, logprob in top_logprobs.items():
        start = token.strip().lower()
        for word in mass if start else ():
            if word.startswith(start):
                mass[word] += math.exp(logprob)
    total = mass[YES] + mass[NO]
    return mass[YES] / total if total > 0 else None
