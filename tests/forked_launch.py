"""`python launch.py <args>` for the launches the suite makes by the hundred and that stop before any process starts
(the invalid-input catalogue): each runs launch.py as its own `__main__`, in a process of its own with its own
argv, env, cwd and output files, and exits with launch.py's code. The process is forked from a server
(multiprocessing's forkserver) that imported Hydra and the launcher once: an interpreter and those imports cost
~0.5 s of CPU per launch, half of what a refused launch takes. The exit code is the one launch.py exits with, as
its process records it: where the forkserver loses a child's status, multiprocessing reports 255 (seen once in a
loaded full run, with the right message on stderr)."""

import multiprocessing
import os
import runpy
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LAUNCH = ROOT / "launch.py"
_forks = multiprocessing.get_context("forkserver")
_forks.set_forkserver_preload(["hydra", "prime_rl.config", "prime_rl.launcher.validation", "prime_rl.launcher.job"])


def _run_launch(args: list[str], env: dict[str, str], out: str, err: str, code: str) -> None:
    os.chdir(ROOT)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]  # as an interpreter started with it
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.argv = [str(LAUNCH), *args]
    try:
        runpy.run_path(str(LAUNCH), run_name="__main__")
    except SystemExit as e:  # its sys.exit is this process's exit code
        Path(code).write_text(str(e.code if isinstance(e.code, int) else 0 if e.code is None else 1))
        raise


def run_launch(args: list[str], env: dict[str, str], output_dir: Path, timeout: float) -> subprocess.CompletedProcess:
    """What `subprocess.run([python, launch.py, *args], capture_output=True, text=True, cwd=ROOT, env=env)` returns;
    `output_dir` keeps its stdout and stderr."""
    out, err, code = output_dir / "launch.stdout", output_dir / "launch.stderr", output_dir / "launch.exit"
    code.unlink(missing_ok=True)
    proc = _forks.Process(target=_run_launch, args=(args, env, str(out), str(err), str(code)))
    proc.start()
    proc.join(timeout)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        raise subprocess.TimeoutExpired(["launch.py", *args], timeout)
    exit_code = int(code.read_text()) if code.exists() else proc.exitcode
    return subprocess.CompletedProcess(["launch.py", *args], exit_code, out.read_text(), err.read_text())
