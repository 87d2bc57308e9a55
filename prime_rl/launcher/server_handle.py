"""The student's vLLM server of a command that runs in one process around it (devstep, serve, eval), as the launcher
runs it: started from the `inference` role of the launcher's own plan (inference/server.py vllm_command; on
`inference.port=0` a port of the kernel's choosing, published in the run dir once it serves), spawned by the
launcher's supervisor in a process group of its own with the run's marker and key, and stopped with its whole group
however the command ends: on return, error or signal by the `with`, at exit by atexit, and after a SIGKILL of this
process by the launcher's reaper. Or a standing one (`inference.url`, launcher/standing_server.py), attached to as
it is: used, never stopped."""

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from prime_rl.config.schema import Config
from prime_rl.config.user_error import UserError, run_or_exit
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.job import check_gpus, prepared
from prime_rl.launcher.plan import Plan, build_plan
from prime_rl.launcher.run_lock import claim_run_dir
from prime_rl.launcher.standing_server import standing_key
from prime_rl.launcher.supervisor import RoleFailed, Supervisor
from prime_rl.models import student_dir
from prime_rl.protocol.run_dir import RunDir
from prime_rl.protocol.servers import SERVER_KEY_ENV, STUDENT_MODEL_NAME, STUDENT_ROLE

ROLE = STUDENT_ROLE  # the student's server; this process is the plan's orchestrator and trainer
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


def claim(run_dir: Path | None) -> Path:
    """The run dir, locked for this process as the launcher locks its own: `run_dir`, which must hold no earlier
    run, or a new temporary one."""
    path = (run_dir or Path(tempfile.mkdtemp(prefix="prime-rl-"))).resolve()
    earlier = RunDir(path).earlier_run()
    if earlier:
        raise UserError(
            f"run dir in use [--run-dir]: {path} holds an earlier run ({', '.join(earlier)}); fix: give "
            "it a new --run-dir, or none (a temporary one)"
        )
    holder = claim_run_dir(path)
    if holder:
        raise UserError(
            f"run dir {path} is in use by another launcher (pid {holder}); fix: give it its own --run-dir, or none"
        )
    return path


def command_plan(cfg: Config, run_dir: Path | None) -> Plan:
    """The launcher's plan of the checked run `cfg` in `run_dir` (claim), its models prepared as the launcher's job
    prepares them, checked as the launcher checks it before any server starts."""
    path = claim(run_dir)
    # the command's own requests do not wait for a server restarted in place: its server's death ends the command
    cfg = replace(cfg, launcher=replace(cfg.launcher, server_restarts=0))
    try:
        plan = build_plan(prepared(cfg), path, visible_gpus())
        check_gpus(plan)
    except BaseException:
        if run_dir is None:  # a temporary run dir holds nothing yet to read back
            shutil.rmtree(path, ignore_errors=True)
        raise
    return plan


class ServerHandle:
    """The plan's student server, started here (its supervisor's), or the standing one it names (inference.url)."""

    def __init__(self, plan: Plan, supervisor: Supervisor | None = None):
        self.plan, self.supervisor = plan, supervisor
        self.replaced = supervisor is None  # whether it may hold other weights than the student's: a standing one may

    def check(self) -> None:
        """Raise RoleFailed where the started server has died."""
        if self.supervisor:
            self.supervisor.check()

    async def load(self, client, weights: Path | None, adapter: bool) -> str:
        """Serve `weights` (None: the student's starting weights), as the run's orchestrator loads them through
        `client`: full weights reloaded in place, an adapter loaded under the run's LoRA name; the starting weights
        reloaded only where they were replaced. Returns the model name to sample them under."""
        if weights is None or adapter:
            if self.replaced:
                await client.reload_weights(str(student_dir(self.plan.config).resolve()))
                self.replaced = False
            if weights is None:
                return STUDENT_MODEL_NAME
            lora = self.plan.config.trainer.lora.name
            await client.load_lora(lora, str(weights.resolve()))
            return lora
        await client.reload_weights(str(weights.resolve()))
        self.replaced = True
        return STUDENT_MODEL_NAME


@contextmanager
def student_server(plan: Plan, key: str | None = None) -> Iterator[ServerHandle]:
    """The plan's student server, serving, with `key` (None: a fresh one); or the standing one it names, with its
    own. This process holds the key as the launcher's orchestrator does."""
    previous = os.environ.get(SERVER_KEY_ENV)
    try:
        if plan.config.inference.url:
            os.environ[SERVER_KEY_ENV] = standing_key(plan.config)
            yield ServerHandle(plan)
        else:
            with started(plan, key) as supervisor:
                os.environ[SERVER_KEY_ENV] = supervisor.server_key
                yield ServerHandle(plan, supervisor)
    finally:
        if previous is None:
            os.environ.pop(SERVER_KEY_ENV, None)
        else:
            os.environ[SERVER_KEY_ENV] = previous


@contextmanager
def started(plan: Plan, key: str | None) -> Iterator[Supervisor]:
    """The plan's student server started by a supervisor of its own, and stopped with its whole group. One that
    fails to start, or dies while in use, ends this process with exit code 1 and its log's tail."""
    supervisor = Supervisor(plan, key)
    try:
        with supervisor.guarded():
            try:
                RunDir(plan.run_dir).server_url(ROLE).unlink(missing_ok=True)  # only this server's address there
                supervisor.wait_ready([supervisor.start(plan.role(ROLE))])
                yield supervisor
            except Exception:
                supervisor.check()  # an error of the step (a request refused, retried out) may be the server's death
                raise
    except RoleFailed as e:  # as the launcher ends on a role's failure: everything stopped, the role and its log
        supervisor.report_failure(e)
        sys.exit(1)
    finally:
        supervisor.log.close()
