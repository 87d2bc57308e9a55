"""The supervisor on stand-in children: tiny HTTP servers for the vLLM roles, sleeping or exiting processes for
orchestrator and trainer. Every stand-in starts a grandchild in its own process group and records both pids,
so each test can check that nothing of the run survives."""

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from prime_rl.config.schema import Config, LauncherConfig
from prime_rl.launcher.plan import Plan, Role
from prime_rl.launcher.processes import RUN_ENV, group_alive, marked_processes, spawn, stop_children
from prime_rl.launcher.progress import RunState, summary_lines
from prime_rl.launcher.supervisor import run_plan
from prime_rl.protocol.run_dir import RunDir

# argv: pid_file mode [args...]; modes: server PORT | silent | worker SECONDS EXIT_CODE [metrics]; "stubborn"
# anywhere makes the grandchild ignore SIGTERM; "escape" starts it in a session of its own (as wandb's service does).
STANDIN = r"""
import json, os, subprocess, sys, time
from pathlib import Path
pid_file, mode, args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
name = pid_file.stem
shell = "trap '' TERM; exec sleep 600" if "stubborn" in args else "exec sleep 600"
grandchild = subprocess.Popen(["sh", "-c", shell], start_new_session="escape" in args)  # else in our group
def ignores_term(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("SigIgn:")[1].split()[0], 16) & (1 << 14)  # SIGTERM, signal 15: bit 14
while "stubborn" in args and not ignores_term(grandchild.pid):  # sh has not run its trap yet: no one may signal
    time.sleep(0.01)
pid_file.with_suffix(".tmp").write_text(f"{os.getpid()} {grandchild.pid}")
pid_file.with_suffix(".tmp").rename(pid_file)
print(f"{name} running", flush=True)
if mode == "server":
    from http.server import BaseHTTPRequestHandler, HTTPServer
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        def log_message(self, *a):
            pass
    HTTPServer(("127.0.0.1", int(args[0])), Handler).serve_forever()
elif mode == "silent":
    time.sleep(600)
else:
    if "metrics" in args:
        run_dir = pid_file.parent.parent
        with open(run_dir / "metrics.jsonl", "a") as f:
            for step in (1, 2, 3):
                f.write(json.dumps({"step": step, "reward/mean": 0.5, "loss": 0.25, "time/step": 0.1}) + "\n")
            f.write('{"step": 4, "rew')  # a line still being written
    for i in range(30):
        print(f"{name} log line {i}")
    sys.stdout.flush()
    time.sleep(float(args[0]))
    sys.exit(int(args[1]))
"""

DRIVER = (
    "import pickle, sys; from prime_rl.launcher.supervisor import run_plan; "
    "sys.exit(run_plan(pickle.load(open(sys.argv[1], 'rb'))))"
)


def standin(run_dir: Path, name: str, mode: str, *args: str) -> Role:
    port = int(args[0]) if mode == "server" else None
    return Role(
        name=name,
        command=[sys.executable, "-c", STANDIN, str(run_dir / "pids" / f"{name}.pids"), mode, *args],
        env={},
        gpus=[],
        log_file=run_dir / "logs" / f"{name}.log",
        config_file=run_dir / "configs" / f"{name}.yaml",
        port=port,
    )


def make_plan(run_dir: Path, roles: list[Role], ready_timeout_s: float = 20.0, stop_grace_s: float = 2.0) -> Plan:
    config = Config(max_steps=3, launcher=LauncherConfig(ready_timeout_s=ready_timeout_s, stop_grace_s=stop_grace_s))
    return Plan(run_dir, config, roles)


def server(run_dir: Path, name: str = "inference") -> Role:
    return standin(run_dir, name, "server", "0")  # like our vLLM servers: a port of the kernel's choosing


def recorded_pids(run_dir: Path) -> list[int]:
    return [int(p) for f in (run_dir / "pids").glob("*.pids") for p in f.read_text().split()]


def alive(pid: int) -> bool:
    """Running, not a zombie (an orphan's zombie stays until init reaps it, which some inits never do)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def assert_nothing_survives(run_dir: Path, expected_pid_files: int) -> None:
    pids = recorded_pids(run_dir)
    assert len(pids) == 2 * expected_pid_files  # each stand-in and its grandchild
    assert [p for p in pids if alive(p)] == []
    leaders = pids[::2]  # a stand-in is its group's leader: pgid == pid
    assert [p for p in leaders if group_alive(p)] == []


def wait_for(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "pids").mkdir()
    yield tmp_path
    for pid in recorded_pids(tmp_path):  # a failed test must not leave its stand-ins behind
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.integration
def test_success_returns_0_and_leaves_no_process(run_dir):
    plan = make_plan(
        run_dir,
        [
            server(run_dir),
            standin(run_dir, "orchestrator", "worker", "0.3", "0"),
            standin(run_dir, "trainer", "worker", "0.6", "0", "metrics"),
        ],
    )
    assert run_plan(plan) == 0
    # The trainer's grandchild outlived its leader; stopping the group took it too.
    assert_nothing_survives(run_dir, 3)
    # the launcher summarises metrics.jsonl into summary.json (the torn last line is skipped)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["steps"], summary["loss/final"], summary["reward/mean/final"]) == (3, 0.25, 0.5)
    assert outcome(run_dir)["status"] == "finished"
    # the server bound a port of the kernel's choosing; the launcher read it back and published it
    url = urlsplit((run_dir / "servers" / "inference.url").read_text())
    assert (url.hostname, url.path) == ("127.0.0.1", "/v1") and url.port not in (None, 0)
    assert "trainer log line 29" in (run_dir / "logs" / "trainer.log").read_text()


@pytest.mark.integration
def test_child_failure_returns_1_naming_role_and_log_tail(run_dir, capsys):
    plan = make_plan(
        run_dir,
        [
            server(run_dir),
            standin(run_dir, "orchestrator", "worker", "60", "0"),
            standin(run_dir, "trainer", "worker", "0.3", "3"),
        ],
    )
    started = time.monotonic()
    assert run_plan(plan) == 1
    assert time.monotonic() - started < 8
    err = capsys.readouterr().err
    failed = outcome(run_dir)
    assert (failed["status"], failed["role"], failed["exit_code"], failed["signal"]) == ("failed", "trainer", 3, None)
    # the last 20 lines of its log follow the error line
    assert "trainer log line 29" in err and "trainer log line 10" in err and "trainer log line 9\n" not in err
    assert_nothing_survives(run_dir, 3)


@pytest.mark.integration
def test_server_never_ready_gives_up_naming_role(run_dir, capsys):
    plan = make_plan(
        run_dir,
        [
            standin(run_dir, "inference", "silent"),
            standin(run_dir, "orchestrator", "worker", "60", "0"),
        ],
        ready_timeout_s=1.5,
    )
    plan.roles[0].port = 0  # a server that never binds its port
    started = time.monotonic()
    assert run_plan(plan) == 1
    assert 1.5 <= time.monotonic() - started < 8
    failed = outcome(run_dir)
    assert (failed["status"], failed["role"], failed["exit_code"]) == ("failed", "inference", None), failed  # alive
    assert_nothing_survives(run_dir, 2)  # the orchestrator, started alongside, is stopped too


def outcome(run_dir: Path) -> dict:
    return json.loads(RunDir(run_dir).outcome().read_text())


def start_launcher(run_dir: Path, plan: Plan) -> subprocess.Popen:
    (run_dir / "plan.pkl").write_bytes(pickle.dumps(plan))
    launcher = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(run_dir / "plan.pkl")], stderr=open(run_dir / "stderr.txt", "wb")
    )
    wait_for(lambda: len(list((run_dir / "pids").glob("*.pids"))) == len(plan.roles), 20)
    return launcher


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_everything(run_dir, sig):
    plan = make_plan(
        run_dir,
        [
            server(run_dir),
            standin(run_dir, "orchestrator", "worker", "60", "0"),
            standin(run_dir, "trainer", "worker", "60", "0"),
        ],
    )
    launcher = start_launcher(run_dir, plan)
    launcher.send_signal(sig)
    assert launcher.wait(timeout=10) == 128 + sig
    assert (outcome(run_dir)["status"], outcome(run_dir)["signal"]) == ("stopped", sig.name)
    assert_nothing_survives(run_dir, 3)


@pytest.mark.integration
def test_a_grandchild_that_left_its_process_group_is_stopped_too(run_dir):
    plan = make_plan(run_dir, [standin(run_dir, "trainer", "worker", "0.5", "1", "escape")])
    assert run_plan(plan) == 1
    assert_nothing_survives(run_dir, 1)


@pytest.mark.integration
def test_second_ctrl_c_kills_at_once(run_dir):
    plan = make_plan(run_dir, [standin(run_dir, "trainer", "worker", "60", "0", "stubborn")], stop_grace_s=60)
    launcher = start_launcher(run_dir, plan)
    launcher.send_signal(signal.SIGINT)
    wait_for(lambda: "stopping trainer" in (run_dir / "logs" / "launcher.log").read_text(), 5)
    started = time.monotonic()
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=10) == 130
    assert time.monotonic() - started < 5  # not the 60 s grace period
    assert_nothing_survives(run_dir, 1)


@pytest.mark.integration
def test_member_ignoring_sigterm_gets_sigkilled(run_dir):
    child = spawn(standin(run_dir, "orchestrator", "worker", "60", "0", "stubborn"), {})
    wait_for(lambda: (run_dir / "pids" / "orchestrator.pids").exists(), 10)
    started = time.monotonic()
    stop_children([child], grace_s=1.0)
    assert time.monotonic() - started >= 1.0  # the group outlived SIGTERM, so it waited the grace period
    assert child.exit_code() == -signal.SIGTERM  # the leader itself did stop on SIGTERM
    assert_nothing_survives(run_dir, 1)
    stop_children([child], grace_s=1.0)  # idempotent: nothing left to signal
    assert child.stopped


def test_run_state_tolerates_partial_and_odd_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = RunState(path)
    tail.poll()  # no file yet
    path.write_text('{"step": 1, "time/step": 2.0, "reward/mean": 0.1}\nnot json\n[1]\n{"step": 2, "lo')
    tail.poll()
    assert tail.step == 1 and tail.latest["reward/mean"] == 0.1
    with open(path, "a") as f:
        f.write('ss": 0.5, "time/step": 4.0}\n{"step": 1, "eval/reward": 0.7}\n')
    tail.poll()
    assert tail.step == 2 and tail.latest["loss"] == 0.5 and tail.latest["eval/reward"] == 0.7
    assert tail.eta_s(max_steps=4, elapsed_s=0) == pytest.approx(3.0 * 2)
    assert summary_lines(tmp_path, tail)[0] == "summary (metrics.jsonl (last line)):"


@pytest.mark.integration
def test_children_get_their_own_wandb_service(run_dir, monkeypatch):
    """A W&B service of the launching process (a notebook, a test) is not handed down: a resumed trainer
    sharing it would find its run id still held by the killed one."""
    monkeypatch.setenv("WANDB_SERVICE", "2-1234-tcp-localhost-5678")
    check = "import os, sys; sys.exit(3 if 'WANDB_SERVICE' in os.environ else 0)"
    role = Role(
        name="trainer",
        command=[sys.executable, "-c", check],
        env={},
        gpus=[],
        log_file=run_dir / "logs" / "trainer.log",
        config_file=run_dir / "configs" / "trainer.yaml",
    )
    assert run_plan(make_plan(run_dir, [role])) == 0


@pytest.mark.integration
def test_a_zombie_is_no_live_process_of_its_group_or_its_run():
    """A process that exited and was never reaped (an orphan under an init that does not reap) still answers
    killpg(pgid, 0) and still has its environ; the scans (psutil) see it as gone."""
    env = os.environ | {RUN_ENV: "zombie-test"}
    dead = subprocess.Popen(["true"], env=env, start_new_session=True)  # never waited for: a zombie
    live = subprocess.Popen(["sleep", "30"], env=env, start_new_session=True)
    try:
        while psutil.Process(dead.pid).status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
        os.killpg(dead.pid, 0)  # the group still "exists"
        assert not group_alive(dead.pid) and group_alive(live.pid)
        assert marked_processes("zombie-test") == [live.pid]
    finally:
        live.kill()
        live.wait()
        dead.wait()


def test_a_run_restarts_only_after_a_crash_that_came_after_a_trained_step(tmp_path):
    """launcher/job.py restart_reason: what restarts a run from its checkpoint, and what may not."""
    from dataclasses import replace

    from prime_rl.config import compose_config
    from prime_rl.launcher.job import restart_reason
    from prime_rl.launcher.plan import Node, build_plan

    plan, run_dir = build_plan(compose_config([]), tmp_path, []), RunDir(tmp_path)

    def attempt(status: str = "failed", exit_code: int | None = -9, trained: range = range(3)) -> None:
        facts = {"role": "trainer", "reason": "failed (exit code -9)", "exit_code": exit_code, "log": "trainer.log"}
        run_dir.outcome().write_text(json.dumps({"status": status, "signal": None} | facts))
        rows = "".join(json.dumps({"step": step, "loss": 0.1}) + "\n" for step in trained)
        run_dir.metrics.write_text(rows + '{"step": 9, "lo')  # the line a killed trainer left half-written

    attempt()
    assert restart_reason(plan, 1, start=2) == "role trainer failed (exit code -9); its log: trainer.log"
    assert restart_reason(plan, 1, start=3) is None  # no step since the attempt started: it would fail again
    assert restart_reason(plan, 0, start=0) is None  # finished
    attempt(exit_code=2)
    assert restart_reason(plan, 1, start=0) is None  # a user's mistake comes again
    attempt(status="stopped", exit_code=None)
    assert restart_reason(plan, 130, start=0) is None  # a stop someone asked for
    attempt()
    multi = replace(plan, node=Node(end_file=tmp_path / "nodes" / "end.7.0"))
    assert restart_reason(multi, 1, start=0) is None  # SLURM's to requeue
