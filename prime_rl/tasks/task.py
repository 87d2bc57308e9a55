"""A task is a train split, an eval split and a verifier (the loader of each kind: tasks/registry.py). An example
of task=gym is played as an episode against its environment instead, which gives the reward."""

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class EnvSpec:
    """How an example is played as a multi-turn episode (task=gym): the environment's factory and options, the
    seed its reset() gets, and the episode's limits."""

    factory: str  # <module>:<callable> returning an object with reset(seed=) and step(action) (tasks/gym_env.py)
    options: dict = field(compare=False)  # the factory's keyword arguments (task.options)
    seed: int  # reset(seed=...): every episode of the example plays the same instance
    max_turns: int  # replies per episode at most
    timeout_s: float  # one reset(), step() or tool call's limit
    tool_parser: str  # the vLLM tool parser that reads the student's tool calls (where the environment has tools)

    @property
    def kind(self) -> str:
        """Which environments can be reused for this example: the same factory with the same options."""
        return f"{self.factory} {sorted(self.options.items())!r}"


@dataclass(frozen=True)
class Example:
    prompt: str  # the user message
    answer: str  # the reference answer
    system: str | None = None  # a system message before the prompt (None: the chat template's default)
    entry: dict | None = field(default=None, compare=False)  # reasoning_gym: the entry its score_answer reads
    source: str = ""  # in a task mix: the label of the source it comes from ("" outside a mix)
    mode: str | None = None  # in a task mix: its source's training mode (None: the run's training_mode)
    env: EnvSpec | None = field(default=None, compare=False)  # task=gym: played as an episode, prompt from reset()

    @property
    def messages(self) -> list[dict]:
        system = [{"role": "system", "content": self.system}] if self.system is not None else []
        return system + [{"role": "user", "content": self.prompt}]

    def shown(self, template: str) -> "Example":
        """The example with `template` as a system message after its own (if any), `{answer}` in it the reference
        answer: what a scorer is shown that the student is not (a self-teacher's context, a teacher's system_prompt)."""
        text = template.format(answer=self.answer)
        return replace(self, system=text if self.system is None else f"{self.system}\n\n{text}")


@dataclass
class Task:
    name: str
    train: list[Example]
    eval: list[Example]
    verify: Callable  # (completion, example) -> reward, in process; the orchestrator's workers build their own
    weights: dict[str, float] = field(default_factory=dict)  # a mix: each source's label and weight
    by_source: dict[str, list[Example]] = field(init=False, repr=False)  # a mix: the train split of each source

    def __post_init__(self):
        self.by_source = {label: [ex for ex in self.train if ex.source == label] for label in self.weights}

    def reward(self, completion: str, example: Example) -> float:
        return self.verify(completion, example)

    def draw(self, rng: random.Random, n: int, drawn: list[Example] = ()) -> list[Example]:
        """n distinct train prompts, none of `drawn` (as many as remain); in a mix, each prompt's source drawn
        first, by weight."""
        taken = {id(ex) for ex in drawn}
        if not self.weights:
            pool = [ex for ex in self.train if id(ex) not in taken] if taken else self.train
            return rng.sample(pool, min(n, len(pool)))
        labels = list(self.weights)
        counts = Counter(rng.choices(labels, weights=[self.weights[label] for label in labels], k=n))
        pools = {label: [ex for ex in self.by_source[label] if id(ex) not in taken] for label in labels}
        return [ex for label in labels for ex in rng.sample(pools[label], min(counts[label], len(pools[label])))]
