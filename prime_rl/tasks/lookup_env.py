"""The built-in tool-using environment (`task=lookup`): the prompt asks for the value of a key, the `get` tool
returns it, the reply must be that value. The value is random and never in the prompt, so the reward (the final
reply's similarity to the value, 1.0 = exact) is reachable only through the tool. Gymnasium text API
(tasks/gym_env.py) with `tools`; `demonstration()` is the scripted transcript the built-in models warm-start on:
one call in the hermes format, then the value."""

import json
import random
import string

from prime_rl.tasks.rewards import similarity


class Lookup:
    def __init__(self, min_len: int = 3, max_len: int = 6):
        if not 1 <= min_len <= max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {min_len}, {max_len}")
        self.lengths = (min_len, max_len)
        self.key = self.value = ""

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(seed)
        self.key, self.value = (self._word(rng) for _ in range(2))
        return f"lookup: {self.key}", {}

    def _word(self, rng: random.Random) -> str:
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(*self.lengths)))

    @property
    def tools(self) -> list:
        return [self.get]

    def get(self, key: str) -> str:
        """The value stored under a key.

        Args:
            key: the key to look up
        """
        return self.value if key == self.key else f"no key {key}"

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        return "", similarity(action, self.value), True, False, {}

    def demonstration(self) -> list[dict]:
        """What a perfect player says after the first observation, and what it is told."""
        call = json.dumps({"name": "get", "arguments": {"key": self.key}})
        return [
            {"role": "assistant", "content": f"<tool_call>{call}</tool_call>"},
            {"role": "tool", "content": self.get(self.key)},
            {"role": "assistant", "content": self.value},
        ]
