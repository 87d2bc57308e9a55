"""One launcher per run dir: a second one (a resume typed twice, two jobs given the same hydra.run.dir)
would interleave both runs' steps, weights and checkpoints in one directory."""

import fcntl
import os
from pathlib import Path
from typing import IO

_held: list[IO] = []  # open for the life of the process: the kernel drops the lock when it exits, even on kill -9


def held_lock_fds() -> list[int]:
    """The run-dir locks this process holds, to hand to a process that must keep the dir locked after us."""
    return [f.fileno() for f in _held]


def claim_run_dir(run_dir: Path, name: str = "launcher.lock") -> str | None:
    """Lock the run dir for this process; None, or the pid of the live launcher that holds it.
    `name`: the lock file (a multi-node job's launchers each hold their node's)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    f = open(run_dir / name, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        return holder
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    _held.append(f)
    return None
