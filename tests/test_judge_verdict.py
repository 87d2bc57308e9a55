"""The judge's reply read as a reward (prime_rl/judge/verdict.py)."""

import math

import pytest

from prime_rl.judge.verdict import rubric_prompt, score_reward, yes_no_reward


@pytest.mark.parametrize(
    ("reply", "scale", "reward"),
    [
        ("7", 10, 0.7),
        ("Score: 3.5 out of 5", 5, 0.7),
        ("8/10: mostly right", 5, 0.8),  # its own scale wins
        ("<think>maybe 2? no</think>9", 10, 0.9),  # the reasoning's numbers are not the verdict
        ("0", 10, 0.0),
        ("11", 10, None),  # outside the scale: not read as 1
        ("no number here", 10, None),
        ("-3", 10, None),  # negative: outside every scale
        ("1-3, say 2", 10, 0.1),  # a range: its first number
    ],
)
def test_a_score_is_read_on_its_scale(reply, scale, reward):
    got = score_reward(reply, scale)
    assert got == (pytest.approx(reward) if reward is not None else None)


def test_yes_is_its_probability_against_no_in_the_top_logprobs():
    top = {" Yes": math.log(0.6), "yes": math.log(0.1), " No": math.log(0.1), "Maybe": math.log(0.2)}
    assert yes_no_reward(top) == pytest.approx(0.7 / 0.8)
    assert yes_no_reward({"Maybe": -0.1, "Perhaps": -2.0, " ": -3.0}) is None
    assert yes_no_reward({"y": math.log(0.3), "n": math.log(0.1), "x": math.log(0.6)}) == pytest.approx(0.75)


def test_the_rubric_gets_the_prompt_the_completion_and_the_answer():
    rubric = "Q: {prompt}\nA: {completion}\nReference: {answer}\nScore 0-10:"
    assert rubric_prompt(rubric, "reverse abc", "cba", "cba") == "Q: reverse abc\nA: cba\nReference: cba\nScore 0-10:"
    assert rubric_prompt(rubric, "p", "c", None).endswith("Reference: \nScore 0-10:")
