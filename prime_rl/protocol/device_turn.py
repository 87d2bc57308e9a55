"""The colocated layout's one rule: the device belongs to one phase at a time. A phase holds the run's device lock
(an flock, so a waiting process sleeps in the kernel and a killed holder frees it) from its first use of the device
to its last; in the separate layout every role has its own share and a turn is free.

The lock file holds when the device was last given back, so the next holder knows how long it sat idle between
two turns: the hand-off, which with the phases' own times accounts for the whole run."""

import asyncio
import time
from pathlib import Path

from prime_rl.protocol.file_lock import FileLock


class DeviceTurn:
    def __init__(self, lock_file: Path, shared: bool):
        self.lock_file = lock_file
        self.shared = shared  # colocated: the roles take turns
        self.lock: FileLock | None = None
        self.wait_s = 0.0  # time this process waited for the other phase to give the device back
        self.idle_s = 0.0  # time the device sat idle before this process's turns: the hand-offs to it
        self.since = time.time()  # a turn given back before this process started was another attempt's

    def __enter__(self) -> "DeviceTurn":
        if self.shared:
            start = time.monotonic()
            self.lock = FileLock(self.lock_file)
            self.lock.acquire()
            self.wait_s += time.monotonic() - start
            self.lock.file.seek(0)
            given_back = self.lock.file.read()
            if given_back and float(given_back) >= self.since:
                self.idle_s += time.time() - float(given_back)
        return self

    def __exit__(self, *exc) -> None:
        if self.lock:
            self.lock.file.truncate(0)
            self.lock.file.write(repr(time.time()))
            self.lock.file.flush()
            self.lock.release()
            self.lock = None

    async def __aenter__(self) -> "DeviceTurn":
        await asyncio.to_thread(self.__enter__)  # the event loop goes on (reward workers, HTTP keep-alives)
        return self

    async def __aexit__(self, *exc) -> None:
        self.__exit__()

    def take_times(self) -> dict[str, float]:
        """The waits and hand-offs since the last call, for the step's metrics (none when nothing is shared)."""
        times = {"time/wait_turn": self.wait_s, "time/handoff": self.idle_s} if self.shared else {}
        self.wait_s = self.idle_s = 0.0
        return times
