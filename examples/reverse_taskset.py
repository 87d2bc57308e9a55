"""A `verifiers` (v1) taskset for `task=verifiers`: reverse a word, scored by two weighted rewards.

    PYTHONPATH=examples python launch.py task=verifiers task.env=reverse_taskset task.options.max_len=6

The taskset id is this module's name; any installed module exporting one Taskset subclass in `__all__` works."""

import random
import string

import verifiers.v1 as vf


class ReverseData(vf.TaskData):
    answer: str  # the reversed word


class ReverseTask(vf.Task[ReverseData]):
    @vf.reward(weight=0.5)
    async def exact(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)

    @vf.reward(weight=0.5)
    async def letters_in_place(self, trace: vf.Trace) -> float:
        """Partial credit: the share of the answer's letters the reply has at the right position."""
        hits = sum(a == b for a, b in zip(trace.last_reply, self.data.answer))
        return hits / max(len(self.data.answer), len(trace.last_reply))


class ReverseConfig(vf.TasksetConfig):
    num_tasks: int = 20000  # words generated
    min_len: int = 3  # shortest word
    max_len: int = 8  # longest word
    seed: int = 0  # seed of the words


class ReverseTaskset(vf.Taskset[ReverseTask, ReverseConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        for _ in range(self.config.num_tasks):
            word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(self.config.min_len, self.config.max_len)))
            yield ReverseTask(ReverseData(prompt=f"reverse: {word}", answer=word[::-1]), self.config.task)


__all__ = ["ReverseTaskset"]
