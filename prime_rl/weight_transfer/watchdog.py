"""A deadline for waits Python cannot interrupt: an NCCL collective or a CUDA stream sync whose peer died (PyNccl
has no timeout, and a worker that failed mid-transfer never joins the broadcast). The process ends with one line
instead of hanging, so the launcher's restart and resume apply."""

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

EXIT_CODE = 1  # a failure, not a user's mistake (exit_with's 2): the launcher may restart the role


@contextmanager
def watchdog(seconds: float, message: str) -> Iterator[None]:
    """Run the block; unless it ends within `seconds`, print `error: <message>` on stderr and end the process."""
    done = threading.Event()

    def expire() -> None:
        if not done.wait(seconds):
            print(f"error: {message}", file=sys.stderr, flush=True)
            os._exit(EXIT_CODE)  # the main thread is stuck in native code: no exception could reach it

    threading.Thread(target=expire, name="watchdog", daemon=True).start()
    try:
        yield
    finally:
        done.set()
