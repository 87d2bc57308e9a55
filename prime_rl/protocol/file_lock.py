"""An exclusive lock between processes on one file (fcntl.flock), held while the file is open: the kernel drops it
when the holder exits, even on kill -9, so a crash never leaves a stale lock behind."""

import fcntl
from pathlib import Path


class FileLock:
    def __init__(self, path: Path):
        self.file = open(path, "a+")  # a+: creates the file and keeps what the holder wrote in it (its pid)

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock, waiting for it unless `blocking` is False; False if another process holds it."""
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True

    def release(self) -> None:
        self.file.close()

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
