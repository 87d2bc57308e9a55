"""Waiting for what another process makes (a file in the run dir, a server, weights): one loop for every such
wait, each trying at its own interval and failing at its deadline with its own error."""

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# what a wait raises at its deadline: a TimeoutError with this message, or the exception this function makes
TimeoutErrorSpec = str | Callable[[], BaseException]


def wait_until(ready: Callable[[], T], timeout_s: float, interval_s: float, error: TimeoutErrorSpec) -> T:
    """The first truthy value of ready(), tried every interval_s; once timeout_s has passed, raise `error`."""
    deadline = time.monotonic() + timeout_s
    while not (value := ready()):
        if time.monotonic() > deadline:
            raise timeout_error(error)
        time.sleep(interval_s)
    return value


async def wait_until_async(
    ready: Callable[[], T | Awaitable[T]], timeout_s: float, interval_s: float, error: TimeoutErrorSpec
) -> T:
    """wait_until without blocking the event loop; `ready` may be a coroutine function (an HTTP probe)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = ready()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise timeout_error(error)
        await asyncio.sleep(interval_s)


def timeout_error(error: TimeoutErrorSpec) -> BaseException:
    return TimeoutError(error) if isinstance(error, str) else error()
