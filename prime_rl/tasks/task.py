"""A task is a train split, an eval split and a verifier."""

from collections.abc import Callable
from dataclasses import dataclass, field

from prime_rl.config.schema import TaskConfig


@dataclass(frozen=True)
class Example:
    prompt: str  # the user message
    answer: str  # the reference answer
    system: str | None = None  # a system message before the prompt (None: the chat template's default)
    entry: dict | None = field(default=None, compare=False)  # reasoning_gym: the entry its score_answer reads

    @property
    def messages(self) -> list[dict]:
        system = [{"role": "system", "content": self.system}] if self.system is not None else []
        return system + [{"role": "user", "content": self.prompt}]


@dataclass
class Task:
    name: str
    train: list[Example]
    eval: list[Example]
    verify: Callable  # (completion, example) -> reward; the orchestrator runs it in processes (verification.py)

    def reward(self, completion: str, example: Example) -> float:
        return self.verify(completion, example)


def load_task(cfg: TaskConfig) -> Task:
    from prime_rl.tasks.builtin import BUILTIN_TASKS
    from prime_rl.tasks.hf import load_hf_task
    from prime_rl.tasks.reasoning_gym_task import load_reasoning_gym_task

    if cfg.name in ("hf", "jsonl"):
        return load_hf_task(cfg)
    if cfg.name == "reasoning_gym":
        return load_reasoning_gym_task(cfg)
    return BUILTIN_TASKS[cfg.name](cfg)
