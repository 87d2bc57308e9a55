"""The student's vLLM server, started as the launcher starts it: the `inference` role of the launcher's own plan
(inference/server.py vllm_command; on `inference.port=0` a port of the kernel's choosing, published in the run dir
once it serves), spawned by the launcher's supervisor in a process group of its own with the run's marker and key,
and stopped with its whole group however the devstep ends: on return, error or signal by the `with`, at exit by
atexit, and after a SIGKILL of this process by the launcher's reaper."""

import atexit
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from prime_rl.config.schema import Config
from prime_rl.config.user_error import run_or_exit
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.job import check_gpus
from prime_rl.launcher.plan import Plan, build_plan
from prime_rl.launcher.reaper import start_reaper
from prime_rl.launcher.run_lock import held_lock_fds
from prime_rl.launcher.supervisor import RoleFailed, Supervisor
from prime_rl.protocol.run_dir import RunDir
from prime_rl.protocol.servers import SERVER_KEY_ENV

ROLE = "inference"  # the student's server; this process is the plan's orchestrator and trainer
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # as Ctrl-C: the server is stopped on the way out


def stop_signals_as_ctrl_c() -> None:
    """SIGTERM and SIGHUP raise a KeyboardInterrupt (its argument: the signal's name), as Ctrl-C does, so every
    `finally` on the way out runs: the student's server is stopped however this process is asked to end."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, interrupt)


def interrupt(signum: int, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_stoppable(work: Callable[[], None]) -> None:
    """`work()` as a command that owns the student's server runs it: a user's mistake is one line (exit 2), and a
    stop signal stops the server and exits 128 + the signal's number."""
    stop_signals_as_ctrl_c()
    try:
        run_or_exit(work)
    except KeyboardInterrupt as e:
        name = e.args[0] if e.args else "SIGINT"
        print(f"stopped by signal ({name}); the student's server is stopped", file=sys.stderr, flush=True)
        sys.exit(128 + signal.Signals[name])


def run_plan(cfg: Config, run_dir: Path) -> Plan:
    """The launcher's plan of the run in `run_dir` (its config the roles read, the trainer's GPUs), checked as the
    launcher checks it before any server starts."""
    plan = build_plan(cfg, run_dir, visible_gpus())
    check_gpus(plan)
    return plan


@contextmanager
def student_server(plan: Plan, key: str | None = None) -> Iterator[Supervisor]:
    """The plan's student server, serving, with `key` (None: a fresh one); this process holds the key as the
    launcher's orchestrator does. A server that fails to start, or dies while in use, ends this process with exit
    code 1 and its log's tail."""
    supervisor = Supervisor(plan, key)
    atexit.register(supervisor.stop)
    reaper = start_reaper(plan.marker, plan.config.launcher.stop_grace_s, held_lock_fds())
    key = os.environ.get(SERVER_KEY_ENV)
    try:
        RunDir(plan.run_dir).server_url(ROLE).unlink(missing_ok=True)  # only this server's address may be there
        supervisor.wait_ready([supervisor.start(plan.role(ROLE))])
        os.environ[SERVER_KEY_ENV] = supervisor.server_key
        yield supervisor
    except RoleFailed as e:
        failed(supervisor, e)
    except Exception:
        died = server_failure(supervisor)
        if died:  # the step's error (a request refused, retried out) is the server's death: show why it died
            failed(supervisor, died)
        raise
    finally:
        supervisor.stop()
        atexit.unregister(supervisor.stop)
        reaper.kill()
        reaper.wait()
        supervisor.log.close()
        restore_key(key)


def server_failure(supervisor: Supervisor) -> RoleFailed | None:
    try:
        supervisor.check()
    except RoleFailed as e:
        return e
    return None


def failed(supervisor: Supervisor, e: RoleFailed) -> None:
    """As the launcher ends on a role's failure: stop everything, name the role, show its log's tail, exit 1."""
    supervisor.stop()
    supervisor.report_failure(e)
    sys.exit(1)


def restore_key(key: str | None) -> None:
    if key is None:
        os.environ.pop(SERVER_KEY_ENV, None)
    else:
        os.environ[SERVER_KEY_ENV] = key
