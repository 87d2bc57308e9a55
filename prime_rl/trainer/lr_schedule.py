"""Learning-rate schedules after warmup, shared by the trainer and the warm-start SFT."""

import math

from prime_rl.config.schema import LrSchedule


def decay_factor(schedule: LrSchedule, progress: float) -> float:
    """Multiplier of the peak lr once `progress` (0 → 1) of the steps after warmup are done."""
    if schedule == LrSchedule.cosine:
        return 0.5 * (1 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
    return 1.0
