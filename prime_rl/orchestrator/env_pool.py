"""The orchestrator's environments (task=gym): made by their factory, reused across episodes through reset() as
Gymnasium's are, and called in threads with a time limit (task.env_timeout_s), so a slow reset() or step() never
blocks the event loop. Python cannot stop a thread: a call that overruns its limit is abandoned (a daemon thread,
gone with the process) and its environment is never reused. Failures are counted by the episodes; the first
traceback of the run goes to the orchestrator's log."""

import asyncio
import contextlib
import sys
import threading
import traceback
from collections import defaultdict

from prime_rl.tasks.gym_env import make_env, observation_of
from prime_rl.tasks.task import EnvSpec


class EnvPool:
    def __init__(self):
        self.idle: dict[str, list] = defaultdict(list)  # environments between episodes, by EnvSpec.kind
        self.traceback_shown = False

    async def reset(self, spec: EnvSpec) -> tuple[object, str]:
        """An environment of the spec's kind (an idle one, or a new one) reset to its seed, and the observation."""
        env = self.idle[spec.kind].pop() if self.idle[spec.kind] else None

        def reset():
            made = env if env is not None else make_env(spec)
            return made, observation_of(made.reset(seed=spec.seed))

        return await call_in_thread(reset, spec.timeout_s)

    def release(self, spec: EnvSpec, env) -> None:
        """An episode is over: its environment (None if it failed) waits for the next reset()."""
        if env is not None:
            self.idle[spec.kind].append(env)

    def report(self, error: BaseException) -> None:
        if isinstance(error, TimeoutError) or self.traceback_shown:
            return
        self.traceback_shown = True
        trace = "".join(traceback.format_exception(error))
        print(f"environment error (reward 0; later ones are only counted):\n{trace}", file=sys.stderr, flush=True)


async def call_in_thread(fn, timeout_s: float):
    """fn() in a daemon thread, awaited for at most timeout_s (then TimeoutError; the thread is left to finish)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result, error):
        if future.done():  # timed out: no one waits for it any more
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work():
        try:
            result, error = fn(), None
        except Exception as e:
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop is closed: the orchestrator ended while the call overran
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, daemon=True).start()
    try:
        return await asyncio.wait_for(future, timeout_s)
    except asyncio.TimeoutError as e:  # not the built-in TimeoutError before Python 3.11
        raise TimeoutError(f"no answer within {timeout_s} s") from e
