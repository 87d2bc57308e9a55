"""A multi-turn environment of your own, in the shape `task=gym` plays (the Gymnasium text API, as GEM's
GuessTheNumber): guess a number, told "higher" or "lower" after each wrong guess.

    PYTHONPATH=examples python launch.py task=gym task.env=guess_number:GuessNumber +task.options.high=16 \\
        task.max_turns=6 model.warm_start.task=reverse
"""

import random
import re


class GuessNumber:
    def __init__(self, high: int = 16, guesses: int = 6):
        if high < 2 or guesses < 1:
            raise ValueError(f"need high >= 2 and guesses >= 1, got {high}, {guesses}")
        self.high, self.guesses = high, guesses
        self.number, self.left = 0, 0

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        self.number = random.Random(seed).randint(1, self.high)
        self.left = self.guesses
        return f"Guess my number between 1 and {self.high}. Reply with the number only.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        self.left -= 1
        found = re.search(r"-?\d+", action)
        if found and int(found.group()) == self.number:
            return "Right.", 1.0, True, False, {}
        hint = "Reply with a number." if not found else "Higher." if int(found.group()) < self.number else "Lower."
        return hint, 0.0, False, self.left == 0, {}
