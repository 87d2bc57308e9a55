"""Hand-offs between the processes of a run without polling: whoever makes a file (a batch, weights) announces it
on a named pipe in the run dir, and whoever waits for it sleeps in the kernel until then.

The file stays the truth: the waiter looks for it before it sleeps and after every wake-up, and the pipe only cuts
the sleep short. An announcement nobody listens to is dropped, a lost one costs `fallback_s`, never correctness.
Pipes do not reach across machines: a multi-node job waits with the fallback interval alone.
"""

import asyncio
import contextlib
import errno
import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from prime_rl.protocol.polling import TimeoutErrorSpec, timeout_error

T = TypeVar("T")

ANNOUNCED_FALLBACK_S = 1.0  # one machine: how long a lost announcement can delay a waiter


def fallback_s(across_machines: bool, poll_s: float) -> float:
    """How often a waiter looks without an announcement: across machines none arrives, so at `poll_s`."""
    return poll_s if across_machines else ANNOUNCED_FALLBACK_S


def announce(channel: Path) -> None:
    """Wake whoever waits on `channel` now (each waiter has its own pipe); nothing happens when nobody does."""
    for pipe in channel.parent.glob(f"{channel.name}.*"):
        wake(pipe)


def wake(pipe: Path) -> None:
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)  # no O_CREAT: only a waiter makes its pipe
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENXIO):  # gone, or its waiter died: nobody to wake
            return
        raise
    try:
        os.write(fd, b"\n")
    except BlockingIOError:  # the pipe is full of unread wake-ups: the waiter is woken already
        pass
    finally:
        os.close(fd)


class Listener:
    """The waiting side of a channel: a pipe of this process's own (one pipe wakes one reader, and the ranks of a
    trainer each wait for the batch). Opened before the first look for the file, so no announcement falls
    between the look and the sleep."""

    def __init__(self, channel: Path):
        channel.parent.mkdir(parents=True, exist_ok=True)
        self.pipe = channel.with_name(f"{channel.name}.{os.getpid()}")
        self.pipe.unlink(missing_ok=True)  # a dead process's, whose pid this one got
        os.mkfifo(self.pipe)
        # read-write: the listener is a writer too, so the pipe never reads as closed (EOF would wake select forever)
        self.fd = os.open(self.pipe, os.O_RDWR | os.O_NONBLOCK)

    def wait(self, ready: Callable[[], T], timeout_s: float, fallback_s: float, error: TimeoutErrorSpec) -> T:
        """The first truthy ready(), looked at on every announcement and at least every fallback_s."""
        deadline = time.monotonic() + timeout_s
        while not (value := ready()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise timeout_error(error)
            if select.select([self.fd], [], [], min(left, fallback_s))[0]:
                self.drain()
        return value

    async def wait_async(
        self, ready: Callable[[], T], timeout_s: float, fallback_s: float, error: TimeoutErrorSpec
    ) -> T:
        """wait() without blocking the event loop."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        loop.add_reader(self.fd, woken.set)  # level-triggered: fires again while an announcement is unread
        deadline = time.monotonic() + timeout_s
        try:
            while not (value := ready()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise timeout_error(error)
                woken.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(left, fallback_s))
                self.drain()
        finally:
            loop.remove_reader(self.fd)
        return value

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 4096):
                pass

    def close(self) -> None:
        os.close(self.fd)
        self.pipe.unlink(missing_ok=True)
