"""The learning rate over a run: linear warmup, then constant or a cosine decay to 0 at the last step."""

import math

from prime_rl.config.schema import LrSchedule


def lr_factor(step: int, warmup_steps: int, max_steps: int, schedule: LrSchedule) -> float:
    """Multiplier of the peak lr at `step` (0-based): (step + 1) / (warmup_steps + 1) while warming up, so no step
    trains at lr 0, then the schedule over the steps after warmup."""
    warmup = min(1.0, (step + 1) / (warmup_steps + 1))
    progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
    return warmup * decay_factor(schedule, progress)


def decay_factor(schedule: LrSchedule, progress: float) -> float:
    """Multiplier of the peak lr once `progress` (0 → 1) of the steps after warmup are done."""
    if schedule == LrSchedule.cosine:
        return 0.5 * (1 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
    return 1.0
