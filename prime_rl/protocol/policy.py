"""How far the rollouts may lag the trainer: the one rule both sides of `max_async_level` follow."""


def policy_window(step: int, max_async_level: int, start: int = 0) -> int:
    """The oldest policy (weights step) whose rollouts may train step `step`; `start`: the step a resumed run
    began at, whose weights are the oldest that exist."""
    return max(step - max_async_level, start)
