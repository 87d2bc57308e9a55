"""Environments that misbehave on purpose, for the tests (`task.env=tests.envs:<name>`; the processes import them
with the repo root on PYTHONPATH). The well-behaved one is the built-in prime_rl/tasks/retry_env.py."""

import itertools
import threading
import time

from prime_rl.tasks.retry_env import ReverseRetry

HANG_S = 3.0  # longer than the tests' task.env_timeout_s


class Faulty(ReverseRetry):
    """The built-in environment, except that its calls take turns at failing: of every four step() calls in the
    process, the second raises, the third hangs and the fourth returns a number as the observation; of every five
    reset() calls, the fourth raises (the launcher's check, the first, passes)."""

    calls = itertools.count()
    resets = itertools.count()
    lock = threading.Lock()

    def reset(self, seed=None):
        with Faulty.lock:
            n = next(Faulty.resets) % 5
        if n == 3:
            raise RuntimeError("the environment cannot start")
        return super().reset(seed)

    def step(self, action: str):
        with Faulty.lock:
            n = next(Faulty.calls) % 4
        if n == 1:
            raise RuntimeError("the environment broke")
        if n == 2:
            time.sleep(HANG_S)
        if n == 3:
            return 123, 0.0, False, False, {}
        return super().step(action)


class Broken(ReverseRetry):
    """Every reset() raises."""

    def reset(self, seed=None):
        raise RuntimeError("the environment cannot start")


class NotAnEnvironment:
    """Made by its factory, but with neither reset() nor step()."""
