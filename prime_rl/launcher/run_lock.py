"""One launcher per run dir: a second one (a resume typed twice, two jobs given the same hydra.run.dir)
would interleave both runs' steps, weights and checkpoints in one directory."""

import os
from pathlib import Path

from prime_rl.protocol.file_lock import FileLock

_held: list[FileLock] = []  # held for the life of the process: the kernel drops them when it exits, even on kill -9


def held_lock_fds() -> list[int]:
    """The run-dir locks this process holds, to hand to a process that must keep the dir locked after us."""
    return [lock.file.fileno() for lock in _held]


def claim_run_dir(run_dir: Path, name: str = "launcher.lock") -> str | None:
    """Lock the run dir for this process; None, or the pid of the live launcher that holds it.
    `name`: the lock file (a multi-node job's launchers each hold their node's)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(run_dir / name)
    if not lock.acquire(blocking=False):
        lock.file.seek(0)
        holder = lock.file.read().strip() or "?"
        lock.release()
        return holder
    lock.file.seek(0)
    lock.file.truncate()
    lock.file.write(f"{os.getpid()}\n")
    lock.file.flush()
    _held.append(lock)
    return None
