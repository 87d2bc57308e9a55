"""Stopping with another process (a server with the program that started it, the reaper with its launcher): the end
of that process as a Linux pidfd, readable once it has ended: that process, not a later one given its number."""

import os
import select


def end_of(pid: int | None) -> list[int]:
    """What select() finds readable once process `pid` has ended; for no pid, nothing: an end that never comes.
    Raises ProcessLookupError where it has ended already."""
    return [] if pid is None else [os.pidfd_open(pid)]


def ended(end: list[int], timeout_s: float | None = None) -> bool:
    """Whether the process of `end` (end_of) has ended, waiting up to `timeout_s` for it (None: until it has)."""
    return bool(select.select(end, [], [], timeout_s)[0])
