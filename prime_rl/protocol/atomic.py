"""Whole or not at all: everything one process writes and another reads appears under its final name complete.

A file is written under a temporary name and renamed (rename is atomic on POSIX file systems, NFS included).
A directory is filled under a temporary name, marked complete with a `STABLE` file, then renamed; readers look for
the marker, so a leftover from a killed writer never counts. Temporary names carry host and pid: the nodes of a
multi-node job share the run dir and may write the same file at once.
"""

import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

STABLE_MARKER = "STABLE"  # the last file of a published directory: weights, checkpoints, built models


def temp_path(path: Path) -> Path:
    """A sibling name no other writer (another process, another node) uses, hidden from `step_*` globs."""
    return path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")


def write_file(path: Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` writes the content; `path` then appears with all of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    write_file(path, lambda tmp: tmp.write_text(text))


def publish_dir(path: Path, fill: Callable[[Path], object]) -> None:
    """`fill(tmp)` writes the directory's files; `path` then appears with all of them and the STABLE marker,
    replacing an older directory of that name."""
    tmp = temp_path(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
        (tmp / STABLE_MARKER).touch()
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def is_complete(path: Path) -> bool:
    return (path / STABLE_MARKER).exists()


def write_once(path: Path, text: str, mode: int = 0o644) -> str:
    """The first writer's text: writes `text` unless the file exists (a hard link fails when it does, so two
    writers racing on a shared file system agree on one content), then returns what the file holds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text()
