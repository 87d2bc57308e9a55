"""Learning-rate schedules after warmup, shared by the trainer and the warm-start SFT."""

import math


def decay_factor(schedule: str, progress: float) -> float:
    """Multiplier of the peak lr once `progress` (0 → 1) of the steps after warmup are done."""
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
    if schedule != "constant":
        raise ValueError(f"unknown lr schedule {schedule!r} (constant | cosine)")
    return 1.0
