"""A task is a train split, an eval split and a verifier."""

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

from prime_rl.config.schema import TaskConfig


@dataclass(frozen=True)
class Example:
    prompt: str  # the user message
    answer: str  # the reference completion


def similarity_reward(completion: str, answer: str) -> float:
    """Partial credit in [0, 1]: difflib's ratio of matching characters (1.0 = exact)."""
    return difflib.SequenceMatcher(None, completion.strip(), answer).ratio()


@dataclass
class Task:
    name: str
    train: list[Example]
    eval: list[Example]
    verifier_calls: int = 0  # how often reward() ran: logged, so a run with verification off can prove it never did

    def reward(self, completion: str, example: Example) -> float:
        self.verifier_calls += 1
        return similarity_reward(completion, example.answer)


def read_jsonl(path: str | Path) -> list[Example]:
    """One {"prompt": ..., "answer": ...} object per line ("solution" is accepted for "answer")."""
    examples = []
    for n, line in enumerate(Path(path).expanduser().read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        answer = row.get("answer", row.get("solution"))
        if "prompt" not in row or answer is None:
            raise ValueError(f"{path}:{n}: each line needs 'prompt' and 'answer' (or 'solution')")
        examples.append(Example(str(row["prompt"]), str(answer)))
    return examples


def load_task(cfg: TaskConfig) -> Task:
    from prime_rl.tasks.builtin import BUILTIN_TASKS

    if cfg.name != "jsonl":
        return BUILTIN_TASKS[cfg.name](cfg)
    rows = read_jsonl(cfg.path)
    if cfg.eval_path:
        return Task("jsonl", rows, read_jsonl(cfg.eval_path)[: cfg.num_eval])
    split = max(1, len(rows) - cfg.num_eval)
    return Task("jsonl", rows[:split], rows[split:])
