"""A step's metrics from its micro-batches: sums over the trained tokens (divided by the step's token count, or by
a source's own in a mix) and maxima (keys ending in `_max`), over micro-batches (`add`) and ranks (trainer/step.py)."""

import torch

from prime_rl.protocol.batch import Sample
from prime_rl.trainer.data import TokenBatch

MAX = "_max"  # a metric whose key ends so is the step's maximum, not a mean
BY_SOURCE = "by_source/"  # by_source/<label>/<name>: a sum over that source's tokens; <label>/tokens: their count


def is_max(key: str) -> bool:
    return key.endswith(MAX)


def source_sums(batch: TokenBatch, per_token: dict[str, torch.Tensor], mask: torch.Tensor) -> dict[str, float]:
    """In a mix: each [B, T] tensor of `per_token` summed over each source's trained tokens (`mask`), and their
    count; nothing outside a mix."""
    labels = sorted(set(batch.sources) - {""})
    sums = {}
    for label in labels:
        ids = torch.tensor([k for k, s in enumerate(batch.sources) if s == label], device=mask.device)
        mine = torch.isin(batch.sample_ids, ids).float() * mask
        sums[f"{BY_SOURCE}{label}/tokens"] = mine.sum().item()
        sums |= {f"{BY_SOURCE}{label}/{name}": (values * mine).sum().item() for name, values in per_token.items()}
    return sums


def step_sums(samples: list[Sample], names: tuple[str, ...]) -> dict[str, float]:
    """The sums every rank starts a step from: the same keys on each, whatever its micro-batches hold."""
    labels = sorted({s.source for s in samples} - {""})
    return {f"{BY_SOURCE}{label}/{name}": 0.0 for label in labels for name in ("tokens", *names)}


def add(sums: dict[str, float], extra: dict[str, float]) -> None:
    """Accumulate one micro-batch's metrics."""
    for key, value in extra.items():
        sums[key] = max(sums.get(key, value), value) if is_max(key) else sums.get(key, 0.0) + value


def metric_means(sums: dict[str, float], total_tokens: int) -> dict[str, float]:
    """Sums over the step's tokens -> means (a source's over its own tokens, as <name>/<label>: only where it has
    some); maxima as they are."""
    means = {}
    for key, value in sums.items():
        if key.startswith(BY_SOURCE):
            label, name = key.removeprefix(BY_SOURCE).rsplit("/", 1)
            tokens = sums[f"{BY_SOURCE}{label}/tokens"]
            if name != "tokens" and tokens:  # none: a source this loss does not see (sft's teacher-written samples)
                means[f"{name}/{label}"] = value / tokens
        else:
            means[key] = value if is_max(key) else value / total_tokens
    return means
