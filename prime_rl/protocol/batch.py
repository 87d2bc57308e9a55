"""The file the orchestrator hands the trainer each step: samples plus the step's orchestrator metrics."""

from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from prime_rl.protocol.atomic import write_file


@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    inference_logprobs: list[float]  # mu: the sampler's logprob of each completion token (rl/opd)
    advantage: float = 0.0  # sequence-level advantage (GRPO)
    reward: float | None = None  # task reward (None when verification is off)
    teacher_logprobs: list[float] | None = None  # opd: log p_T of each completion token


@dataclass
class Batch:
    step: int
    policy_version: int  # weights step the rollouts were sampled from
    samples: list[Sample]
    metrics: dict[str, float] = field(default_factory=dict)  # orchestrator metrics of this step


def write_batch(batch: Batch, path: Path) -> None:
    raw = {
        "step": batch.step,
        "policy_version": batch.policy_version,
        "samples": [asdict(s) for s in batch.samples],
        "metrics": batch.metrics,
    }
    write_file(path, lambda tmp: torch.save(raw, tmp))


def read_batch(path: Path) -> Batch:
    raw = torch.load(path, weights_only=True)
    return Batch(raw["step"], raw["policy_version"], [Sample(**s) for s in raw["samples"]], raw["metrics"])
