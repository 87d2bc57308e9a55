"""The built-in multi-turn environment (`task=retry`): reverse a word, with a few tries. The first observation is
`reverse: <word>`; a reply that is not the reversed word is answered by asking again, until a reply is exact
(reward 1) or the tries run out (reward: the last reply's similarity, as the single-turn `reverse` task scores).
It has the Gymnasium text API (tasks/gym_env.py), and the built-in student, warm-started on `reverse`, plays it
as it is: a second try is a second chance, which RL can learn to need less."""

import random
import string

from prime_rl.tasks.rewards import similarity


class ReverseRetry:
    def __init__(self, tries: int = 3, min_len: int = 3, max_len: int = 8):
        if tries < 1 or not 1 <= min_len <= max_len:
            raise ValueError(f"need tries >= 1 and 1 <= min_len <= max_len, got {tries}, {min_len}, {max_len}")
        self.tries, self.lengths = tries, (min_len, max_len)
        self.word, self.left = "", 0

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(seed)
        self.word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(*self.lengths)))
        self.left = self.tries
        return self.request, {}

    @property
    def request(self) -> str:
        return f"reverse: {self.word}"

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        self.left -= 1
        answer = self.word[::-1]
        if action.strip() == answer:
            return "", 1.0, True, False, {"tries": self.tries - self.left}
        if self.left == 0:
            return "", similarity(action, answer), False, True, {"tries": self.tries}
        return self.request, 0.0, False, False, {}
