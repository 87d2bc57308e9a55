"""Rewards off the orchestrator's event loop: every verifier call runs in a worker process with a time limit
(pebble kills and replaces a worker that overruns it), so a slow or hanging verifier costs its sample a reward
of 0, not the run. A verifier that raises also gives 0; both are counted (`verifier/timeouts`,
`verifier/errors`), and the first traceback goes to the orchestrator's log. A batch in which no call succeeds
stops the run: a broken verifier would otherwise train on all-zero rewards and finish. Processes, not threads: a hung
thread cannot be stopped, and math-verify's own time limits use signals, which work only in a main thread."""

import asyncio
import math
import multiprocessing
import sys

from pebble import ProcessPool

from prime_rl.config.schema import TaskConfig, VerificationConfig
from prime_rl.config.user_error import UserError
from prime_rl.tasks.registry import make_verifier
from prime_rl.tasks.task import Example

_verify = None  # the worker's verifier, built once per worker process


def start_worker(cfg: TaskConfig) -> None:
    global _verify
    _verify = make_verifier(cfg)


def reward_in_worker(completion: str, example: Example) -> float:
    reward = float(_verify(completion, example))
    if not math.isfinite(reward):
        raise ValueError(f"the verifier returned {reward} (a reward must be a finite number)")
    return reward


class VerifierFailed(UserError, RuntimeError):
    """No verifier call of a batch succeeded: the verifier is broken."""


class Verification:
    def __init__(self, task: TaskConfig, cfg: VerificationConfig):
        self.task, self.cfg = task, cfg
        self.pool: ProcessPool | None = None  # started at the first call: pure distillation never starts it
        self.calls = self.errors = self.timeouts = 0
        self.traceback_shown = False  # the first error's traceback goes to the log, once per process

    async def rewards(self, pairs: list[tuple[str, Example]]) -> list[float]:
        """The reward of each (completion, example), computed concurrently by the worker processes."""
        if self.pool is None:
            spawn = multiprocessing.get_context("spawn")  # the orchestrator runs threads: no fork
            self.pool = ProcessPool(self.cfg.workers, initializer=start_worker, initargs=(self.task,), context=spawn)
        futures = [self.pool.schedule(reward_in_worker, (c, ex), timeout=self.cfg.timeout_s) for c, ex in pairs]
        results = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures), return_exceptions=True)
        rewards = [self.outcome(r) for r in results]
        if results and all(isinstance(r, BaseException) for r in results):
            raise VerifierFailed(f"every one of {len(results)} verifier calls failed, the first with: {results[0]!r}")
        return rewards

    def outcome(self, result: float | BaseException) -> float:
        self.calls += 1
        if isinstance(result, TimeoutError):
            self.timeouts += 1
            return 0.0
        if isinstance(result, BaseException):
            self.errors += 1
            if not self.traceback_shown:
                self.traceback_shown = True
                trace = getattr(result, "traceback", None) or repr(result)
                print(f"verifier error (reward 0; later ones are only counted):\n{trace}", file=sys.stderr, flush=True)
            return 0.0
        return result

    def metrics(self) -> dict[str, float]:
        """Counts over the run so far (a run without verification proves it by verifier/calls = 0)."""
        return {"verifier/calls": self.calls, "verifier/errors": self.errors, "verifier/timeouts": self.timeouts}

    def resume(self, row: dict) -> None:
        """Go on counting from a resumed run's last metrics row."""
        self.calls, self.errors, self.timeouts = (int(row.get(k, 0)) for k in self.metrics())

    def close(self) -> None:
        if self.pool is not None:
            self.pool.stop()
            self.pool.join()
