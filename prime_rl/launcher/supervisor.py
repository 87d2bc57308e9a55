"""Runs a plan: start the servers, orchestrator and trainer, wait until the servers serve, watch the run finish.

Fail fast: any child failing, a server exiting or hanging past its restarts in place (server_restarts.py), a server
not ready in time, or a signal to the launcher stops every process group (processes.py) and returns non-zero, naming
the role and showing its log tail.
"""

import atexit
import json
import logging
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import httpx
from rich.console import Console

from prime_rl.launcher.multinode import announce_end, peer_failure, run_over, shared_server_key
from prime_rl.launcher.plan import Plan, RemoteServer, Role
from prime_rl.launcher.processes import RUN_ENV, Child, log_tail, spawn, stop_children, stop_stragglers
from prime_rl.launcher.progress import ProgressLine, RunState, format_duration, summary_lines
from prime_rl.launcher.reaper import start_reaper
from prime_rl.launcher.remote_servers import RemoteServersWatch
from prime_rl.launcher.run_lock import held_lock_fds
from prime_rl.launcher.server_restarts import ServerRestarts
from prime_rl.launcher.standing_server import standing_key
from prime_rl.monitor.metrics import write_summary
from prime_rl.monitor.plots import write_plots
from prime_rl.protocol.atomic import write_text
from prime_rl.protocol.polling import wait_until
from prime_rl.protocol.run_dir import RunDir
from prime_rl.protocol.servers import SERVER_KEY_ENV, serves

POLL_S = 0.5  # how often children are checked: a dead child is noticed within this
HTTP_TIMEOUT_S = 2.0  # per readiness request; a hung server must not stall the loop
TAIL_LINES = 20
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal closed
OUTCOME_FACTS = ("role", "reason", "exit_code", "signal", "log")  # each recorded, None where it does not apply
logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per readiness poll is noise


class RoleFailed(Exception):
    """A role of this node, or (multi-node) another node, failed: its name, its log and why."""

    def __init__(self, name: str, log_file: Path, reason: str, exit_code: int | None = None):
        super().__init__(f"{name} {reason}")
        self.name, self.log_file, self.reason = name, log_file, reason
        self.exit_code = exit_code  # the role's own, where it exited (negative: the signal that killed it)


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run_server_key(plan: Plan) -> str:
    """The key every server of the run answers to: a standing student server's own, the one a multi-node run dir
    holds, else a fresh one."""
    if plan.config.inference.url:
        return standing_key(plan.config)
    return shared_server_key(plan.run_dir) if plan.node.multi else secrets.token_urlsafe(32)


def run_plan(plan: Plan) -> int:
    """Run every role of the plan to completion; the exit code the launcher should return."""
    return Supervisor(plan).run()


class Supervisor:
    def __init__(self, plan: Plan, server_key: str | None = None):
        self.plan = plan
        self.launcher = plan.config.launcher
        self.console = Console(stderr=True)
        self.children: list[Child] = []  # in start order
        self.signum: int | None = None  # set by the signal handler, acted on by the loop
        self.stopping = False
        self.hurry = False  # a second signal: skip what is left of the stop grace period
        (plan.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.log = open(plan.launcher_log, "a", buffering=1)
        self.metrics = RunState(RunDir(plan.run_dir).metrics)
        self.remote = RemoteServersWatch(plan.remote_servers)  # multi-node head: the other nodes' servers
        self.restarts = ServerRestarts(plan, self.say)  # this node's servers, restarted in place
        # the servers answer only the launcher's children, not another run or user
        self.server_key = server_key or run_server_key(plan)

    def run(self) -> int:
        previous = self.handle_signals()
        code = 1
        try:
            with self.guarded():
                code = self.run_roles()
            return code
        finally:
            announce_end(self.plan.node, code)  # multi-node: the other nodes stop too
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.log.close()

    @contextmanager
    def guarded(self) -> Iterator[None]:
        """Whatever happens in this process, the children it starts go with it: stopped on the way out of the
        `with` (also on an unexpected error), at exit, and by the reaper if this process is SIGKILLed (reaper.py)."""
        atexit.register(self.stop)
        reaper = start_reaper(self.plan.marker, self.launcher.stop_grace_s, held_lock_fds())
        try:
            yield
        finally:
            self.stop()
            atexit.unregister(self.stop)
            reaper.kill()
            reaper.wait()

    def run_roles(self) -> int:
        started = time.monotonic()
        servers = [r for r in self.plan.roles if r.is_server]
        workers = [r for r in self.plan.roles if not r.is_server]
        self.say(f"run dir {self.plan.run_dir}; logs in {self.plan.run_dir / 'logs'}")
        outcome_file(self.plan).unlink(missing_ok=True)  # an earlier attempt's: this one has not ended
        for role in servers:  # an earlier attempt's address would send the orchestrator to a dead or foreign port
            RunDir(self.plan.run_dir).server_url(role.name).unlink(missing_ok=True)
            RunDir(self.plan.run_dir).server_restarts(role.name).unlink(missing_ok=True)  # and its restarts
        try:
            if self.plan.one_by_one:
                # one GPU: each server profiles the free memory while it starts, so nothing else may be loading
                for role in servers:
                    self.wait_ready([self.start(role)])
                started_workers = [self.start(r) for r in workers]
            else:
                started_servers = [self.start(r) for r in servers]
                # Orchestrator and trainer start alongside: their imports and model loading overlap the servers'
                # start-up, and the orchestrator waits for the servers itself before its first request.
                started_workers = [self.start(r) for r in workers]
                self.wait_ready(started_servers + self.plan.remote_servers)
                self.remote.start()
            self.watch(started_workers)
        except RoleFailed as e:
            self.stop()
            self.report_failure(e)
            self.record_outcome("failed", role=e.name, reason=e.reason, exit_code=e.exit_code, log=str(e.log_file))
            return 1
        except Interrupted as e:
            self.stop()
            name = signal.Signals(e.signum).name
            self.say(f"stopped by signal ({name})", style="bold yellow")
            self.record_outcome("stopped", signal=name)
            return 128 + e.signum
        self.stop()
        self.record_outcome("finished")
        if not self.plan.node.head:
            self.say("run finished (the head node writes the summary)", style="bold green")
            return 0
        self.say(f"run finished in {format_duration(time.monotonic() - started)}", style="bold green")
        write_summary(RunDir(self.plan.run_dir))
        if write_plots(self.plan.run_dir):
            self.say(f"plots in {self.plan.run_dir / 'plots'}")
        for line in summary_lines(self.plan.run_dir, self.metrics):
            self.say(line)
        return 0

    def start(self, role: Role) -> Child:
        self.check()  # a signal or failure while starting: start nothing more
        child = self.spawn(role)
        self.children.append(child)
        return child

    def spawn(self, role: Role) -> Child:
        try:
            key = {SERVER_KEY_ENV: self.server_key} if role.server_key else {}
            child = spawn(role, {RUN_ENV: self.plan.marker} | key)
        except OSError as e:
            raise RoleFailed(role.name, role.log_file, f"could not start ({e})") from e
        self.say(f"started {role.name} (pid {child.pgid}, log {role.log_file})")
        return child

    def wait_ready(self, servers: list[Child | RemoteServer]) -> None:
        """Wait until every server answers /health and /v1/models, bounded by launcher.ready_timeout_s. A server
        of this node on a port of the kernel's choosing is then published in the run dir for the orchestrator."""
        timeout = self.launcher.ready_timeout_s
        started = time.monotonic()
        pending = list(servers)
        if not pending:
            return
        self.say(f"waiting up to {timeout:g} s for {', '.join(server_name(s) for s in pending)} to serve")
        with self.http() as http:

            def all_serving() -> bool:
                self.check()  # a server that exited, or a signal, ends the wait at once
                for server in list(pending):
                    root = next((r for r in server_roots(server) if serves(http, r)), None)
                    if root is None:
                        continue
                    pending.remove(server)
                    if isinstance(server, Child) and server.role.port == 0:
                        write_text(RunDir(self.plan.run_dir).server_url(server.role.name), root + "/v1")
                    if isinstance(server, Child):
                        self.restarts.serving(server, root)
                    self.say(f"{server_name(server)} ready after {time.monotonic() - started:.1f} s at {root}")
                return not pending

            wait_until(all_serving, timeout, POLL_S, lambda: not_ready(pending[0], timeout))

    def watch(self, workers: list[Child]) -> None:
        """Show progress until orchestrator and trainer have both exited 0."""
        with ProgressLine(self.console, self.metrics, self.plan.config.max_steps) as progress:
            while True:
                self.check()
                progress.update()
                if all(c.exit_code() == 0 for c in workers) and run_over(self.plan):
                    return
                time.sleep(POLL_S)

    def check(self) -> None:
        """Raise if the launcher was signalled or a child failed. A worker exiting 0 is done, not failed; a server
        exiting at all, or hanging, has failed, since the run still needs it, unless it is restarted in place."""
        if self.signum is not None:
            raise Interrupted(self.signum)
        for child in list(self.children):
            code = child.exit_code()
            down = child.role.is_server and (code is not None or self.restarts.hung(child))
            if not (down or code):
                continue
            failed = f"failed ({describe_exit(code)})" if code is not None else self.restarts.hang()
            if down and self.restarts.may_restart(child.role):
                self.children[self.children.index(child)] = self.restarts.restart(child, failed, self.spawn)
                continue
            self.check_peers()  # the cause, where the role failed because another node failed first
            failed += self.restarts.after(child.role)
            gone = self.remote.gone_now()
            if gone:  # the cause, where the role failed because another node's server is gone
                raise RoleFailed(gone.name, gone.log_file, f"{lost(gone)}; {child.role.name} {failed}", code)
            raise RoleFailed(child.role.name, child.role.log_file, failed, code)
        self.check_restarted()
        self.check_peers()
        if self.remote.lost:  # multi-node head: another node died or was cut off
            raise RoleFailed(self.remote.lost.name, self.remote.lost.log_file, lost(self.remote.lost))

    def check_restarted(self) -> None:
        """Servers restarted in place that serve again are marked so; one not serving in time has failed."""
        if self.restarts.pending:
            with self.http() as http:
                late = self.restarts.poll(http, self.launcher.ready_timeout_s)
            if late:
                raise not_ready(late, self.launcher.ready_timeout_s)

    def http(self) -> httpx.Client:
        """A client of the run's servers (no proxy between them), with the run's key."""
        auth = {"Authorization": f"Bearer {self.server_key}"}
        return httpx.Client(timeout=HTTP_TIMEOUT_S, trust_env=False, headers=auth)

    def check_peers(self) -> None:
        """Multi-node: another node failed, ended the run and said why (its own report beats a guess from here)."""
        peer = peer_failure(self.plan)
        if peer:
            raise RoleFailed(*peer)

    def stop(self) -> None:
        """Stop every started role: orchestrator and trainer first, so no server is stopped with requests
        in flight (vLLM can hang on SIGTERM then), then the servers. Idempotent."""
        self.stopping = True
        self.remote.stop()
        self.restarts.stop()
        workers = [c for c in reversed(self.children) if not c.role.is_server]
        servers = [c for c in reversed(self.children) if c.role.is_server]
        for group in (workers, servers):
            stop_children(group, self.launcher.stop_grace_s, hurry=lambda: self.hurry, say=self.say)
        if self.children:
            stop_stragglers(self.plan.marker, self.launcher.stop_grace_s, say=self.say)

    def handle_signals(self) -> dict[int, object]:
        """Route stop signals to the loop; the previous handlers, to restore afterwards."""
        if threading.current_thread() is not threading.main_thread():
            return {}  # only the main thread may set handlers; atexit and finally still stop the children
        return {sig: signal.signal(sig, self.on_signal) for sig in STOP_SIGNALS}

    def on_signal(self, signum: int, frame: object) -> None:
        # Only set flags: raising here could interrupt a spawn half-way and lose track of a child.
        if self.signum is not None or self.stopping:
            self.hurry = True  # asked twice: SIGKILL now
        else:
            self.signum = signum

    def record_outcome(self, status: str, **facts: object) -> None:
        """How this attempt ended, as data (RunDir.outcome): what the terminal and logs/launcher.log say in words.
        status finished | failed (the role, why, its exit code where it exited, its log) | stopped (the launcher's
        signal)."""
        outcome = {"status": status} | dict.fromkeys(OUTCOME_FACTS) | facts
        write_text(outcome_file(self.plan), json.dumps(outcome) + "\n")

    def report_failure(self, e: RoleFailed) -> None:
        self.say(f"error: role {e.name} {e.reason}; last lines of {e.log_file}:", style="bold red")
        for line in log_tail(e.log_file, TAIL_LINES):
            self.say(f"  {line}")

    def say(self, message: str, style: str | None = None) -> None:
        """To the terminal and to logs/launcher.log."""
        self.console.print(message, style=style, markup=False, highlight=False, soft_wrap=True)
        if not self.log.closed:
            self.log.write(f"{datetime.now():%Y-%m-%d %H:%M:%S} {message}\n")


def outcome_file(plan: Plan) -> Path:
    """Where this node's launcher records how its attempt ended (RunDir.outcome)."""
    return RunDir(plan.run_dir).outcome(plan.node.rank if plan.node.multi else None)


def lost(server: RemoteServer) -> str:
    return f"on node {server.rank} stopped answering (its node died or cannot be reached)"


def server_name(server: Child | RemoteServer) -> str:
    return server.role.name if isinstance(server, Child) else server.name


def server_roots(server: Child | RemoteServer) -> list[str]:
    """Where the server may be listening: its configured port, or the ports its process listens on."""
    if isinstance(server, RemoteServer):
        return [server.root]
    ports = [server.role.port] if server.role.port else server.listening_ports()
    return [f"http://127.0.0.1:{port}" for port in ports]


def not_ready(server: Child | RemoteServer, timeout: float) -> RoleFailed:
    """The failure of a server that did not serve within launcher.ready_timeout_s, with where it was asked."""
    at = ", ".join(server_roots(server)) or "no port bound yet"
    reason = f"not ready after {timeout:g} s (no 200 from /health and /v1/models; {at})"
    log = server.role.log_file if isinstance(server, Child) else server.log_file
    return RoleFailed(server_name(server), log, reason)


def describe_exit(code: int) -> str:
    try:
        return f"exit code {code}, killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    except ValueError:  # a signal without a name
        return f"exit code {code}"
