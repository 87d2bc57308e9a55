"""Faults injected for real into real runs: kill -9 of a role, signals to the launcher, failing endpoints, a
server that never gets ready, two runs at once (secrets that must not reach any file: tests/test_hosted_teachers.py).
Run them alone with `pytest -m faults`."""

import itertools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from prime_rl.inference.client import InferenceClient, InferenceError, Sampling
from prime_rl.launcher.processes import group_alive, marked_processes
from prime_rl.launcher.server_factory import FACTORY_ENV
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.checkpoint import SCHEDULER_FILE
from tests.conftest import ROOT, launch_cmd, unused_port
from tests.http_stub import StubHandler, serve_stub, stub_url
from tests.test_e2e_rl import launch, plan_of

pytestmark = pytest.mark.faults
SHORT = ["max_steps=8", "ckpt.interval=2", "orchestrator.eval.interval=0"]
# a stop is one grace period (launcher.stop_grace_s, 5 s) for all roles, the stragglers' and the summary: a launcher
# that waited on each role in turn, or on a dead role's step timeout, takes minutes; on a busy machine it takes ~11 s
STOPS_WITHIN_S = 30
CONCURRENT_RUNS = 2  # the race is between any two; more only lengthen the test on 2 cores


def started_roles(run_dir: Path) -> dict[str, int]:
    """Role -> pid (= process group) of its latest start, from the launcher's log."""
    log = (run_dir / "logs" / "launcher.log").read_text() if (run_dir / "logs" / "launcher.log").exists() else ""
    return {role: int(pid) for role, pid in re.findall(r"started (\w+) \(pid (\d+)", log)}


def outcome(run_dir: Path) -> dict:
    """How the launch's last attempt ended (RunDir.outcome)."""
    return json.loads(RunDir(run_dir).outcome().read_text())


def train_steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").exists() else []
    return [json.loads(line)["step"] for line in lines if line.endswith("}")]


def wait_until(predicate, proc: subprocess.Popen, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None, (
            f"the launcher exited ({proc.returncode}) before {what}: {proc.stderr.read()[-3000:]}"
        )
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.2)


def assert_checkpoint_intact(run_dir: Path, after: int) -> int:
    step = RunDir(run_dir).latest_checkpoint()
    assert step is not None and step >= after + 2, (step, after)
    checkpoint = run_dir / "checkpoints" / f"step_{step}"
    scheduler = json.loads((checkpoint / SCHEDULER_FILE).read_text())
    assert scheduler["last_epoch"] == step and (checkpoint / ".metadata").is_file()
    return step


def reapers(marker: str) -> list[int]:
    """Live reaper processes of the run (prime_rl/launcher/reaper.py), found by their command line."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"prime_rl.launcher.reaper" in argv and marker.encode() in argv:
            found.append(int(entry.name))
    return found


# The launcher's own stops, one after another in the attempts of one run: asked to stop (SIGTERM; SIGINT takes the
# same handler: tests/test_supervisor.py stops real processes with both) and killed outright (SIGKILL: no handler, no
# atexit, what the OOM killer or `scancel --signal=KILL` does); each stops the run, leaves nothing behind and no
# checkpoint half-written, and the next attempt resumes from the latest. (A role's death restarts the run, or its
# server in place: the two tests after this one.) The last attempt runs on a standing student server
# (tests/standing_servers.py) that other tests' runs share.
LAUNCHER_STOPS = [signal.SIGTERM, signal.SIGKILL]
# opd as pure distillation (adv_tau 0, no verifier) in a 17-token context: prompts of 10-15 tokens and answers of
# 4-9, so vLLM cuts rollouts at the context's end and the teacher still scores them (its request for one token
# more than the sequence must fit too)
PURE_OPD_IN_A_FULL_CONTEXT = [
    "training_mode=opd",
    "trainer.loss.adv_tau=0",
    "orchestrator.verification.enabled=false",
    "inference.max_model_len=17",
    "orchestrator.sampling.max_tokens=8",
]


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_a_stopped_or_killed_launcher_leaves_nothing_and_resume_finishes_the_run(tmp_path, standing_servers):
    run_dir = tmp_path / "run"
    checkpoint = 0
    for attempt, sig in enumerate(LAUNCHER_STOPS):
        overrides = [*SHORT, *(["ckpt.resume=true"] if attempt else []), "max_steps=200"]
        proc = subprocess.Popen(
            launch_cmd(*overrides, f"hydra.run.dir={run_dir}"),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            hit(run_dir, proc, sig, after=checkpoint, roles=3)
        finally:
            if proc.poll() is None:
                proc.kill()
            for pid in marked_processes(str(run_dir.resolve())):
                os.kill(pid, signal.SIGKILL)
        checkpoint = assert_checkpoint_intact(run_dir, after=checkpoint)
    final = checkpoint + 2
    resumed = launch(run_dir, *SHORT, f"max_steps={final}", "ckpt.resume=true", standing=standing_servers)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert plan_of(run_dir)["resume_from"] == checkpoint
    assert train_steps(run_dir) == list(range(final))  # every step exactly once across all the attempts


def kill_at_step(run_dir: Path, proc: subprocess.Popen, role: str, sig: signal.Signals, step: int) -> None:
    """Once `step` steps are trained, `sig` to the process group of `role`'s latest start (SIGSTOP: every process of
    it stops; SIGKILL: the whole server, as the OOM killer or a CUDA error would end it)."""
    wait_until(lambda: len(train_steps(run_dir)) >= step, proc, 300, f"step {step}")
    os.killpg(started_roles(run_dir)[role], sig)


def restart_lines(log: str, role: str) -> list[str]:
    """The launcher's lines for `role`'s restarts in place: why, and which of how many."""
    return re.findall(rf"(?m)(?:^| ){role} (.+?); restarting it in place \(restart (\d of \d)\)", log)


def restart_counts(run_dir: Path, role: str) -> list[int]:
    """restarts/<role> of each trained step (0 before the first)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r.get(f"restarts/{role}", 0) for r in rows if "loss" in r]


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_a_45_step_run_outlives_its_server_killed_three_times_and_restarts_when_its_trainer_or_orchestrator_die(
    tmp_path,
):
    """The default layout on a CPU (colocated). kill -9 of the student's server at steps 5, 10 and 15: each time the
    launcher restarts it in place and the orchestrator brings it back to the policy it served; then kill -9 of the
    trainer, and (once the restarted run has checkpointed again) of the orchestrator: the launcher restarts the run
    from its latest checkpoint each time. The run finishes, every step trained exactly once."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        launch_cmd("max_steps=45", "ckpt.interval=5", "orchestrator.eval.interval=0", f"hydra.run.dir={run_dir}"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for step in (5, 10, 15):
            kill_at_step(run_dir, proc, "inference", signal.SIGKILL, step)
        checkpoint = 15
        for target in ("trainer", "orchestrator"):
            wait_until(checkpointed_past(run_dir, checkpoint), proc, 300, "a checkpoint")
            checkpoint = RunDir(run_dir).latest_checkpoint()
            os.kill(started_roles(run_dir)[target], signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    killed = "failed (exit code -9, killed by SIGKILL)"
    assert restart_lines(out, "inference") == [(killed, f"{k} of 3") for k in (1, 2, 3)], out[-3000:]
    assert len(re.findall(r"inference serves again after [\d.]+ s \(restart \d of 3\)", out)) == 3
    # the orchestrator brought it back to the weights it served before each kill, not the starting ones
    orchestrator_log = (run_dir / "logs" / "orchestrator.log").read_text()
    brought = re.findall(
        r"the inference server serves again after restart (\d): weights/step_(\d+) loaded", orchestrator_log
    )
    assert [k for k, _ in brought] == ["1", "2", "3"] and all(int(step) >= 3 for _, step in brought), brought
    # restarts/inference counts them, step by step, until the restarted run (whose server has had none)
    counts = restart_counts(run_dir, "inference")
    assert counts[:5] == [0] * 5 and [k for k, _ in itertools.groupby(counts)] == [0, 1, 2, 3, 0], counts
    restarts = re.findall(r"restarting the run from step (\d+) \(restart (\d) of 2\): role (\w+) failed", out)
    assert [(r, role) for _, r, role in restarts] == [("1", "trainer"), ("2", "orchestrator")], out[-3000:]
    assert all(int(step) >= 15 for step, _, _ in restarts)
    assert train_steps(run_dir) == list(range(45))  # every step exactly once across the attempts
    # one header per start: the first, three in place, one per restarted run
    assert (run_dir / "logs" / "inference.log").read_text().count("launcher starts inference") == 6
    assert outcome(run_dir)["status"] == "finished"
    assert not marked_processes(str(run_dir.resolve()))


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_opd_outlives_its_servers_killed_and_hung_within_the_budget_and_ends_in_one_line_past_it(tmp_path):
    """opd with LoRA in the separate layout, restarts in place limited to 2 per server: kill -9 of the student's
    server (back on the trained adapter: without it the student's requests would find no such model), of the
    teacher's, then SIGSTOP of the teacher (found hung within ~15 s), all survived; a second kill -9 of the teacher is
    past its budget and ends the run in one line, leaving nothing behind (its checkpoint resumes as any failed run's:
    the test above). Every step it trained, it trained once, from the teacher's scores alone."""
    run_dir = tmp_path / "run"
    opd = [*SHORT, *PURE_OPD_IN_A_FULL_CONTEXT, "lora=on", "deployment.layout=separate"]
    faults = ["max_steps=200", "launcher.server_restarts=2", "launcher.server_hang_s=10", "launcher.restarts=0"]
    proc = subprocess.Popen(
        launch_cmd(*opd, *faults, f"hydra.run.dir={run_dir}"),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    hits = [
        ("inference", signal.SIGKILL, 3),
        ("teacher_inference", signal.SIGKILL, 6),
        ("teacher_inference", signal.SIGSTOP, 9),
        ("teacher_inference", signal.SIGKILL, 12),
    ]
    try:
        for role, sig, step in hits:
            kill_at_step(run_dir, proc, role, sig, step)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    failed = outcome(run_dir)
    reason = "failed (exit code -9, killed by SIGKILL) after 2 restarts in place"
    assert (failed["role"], failed["reason"], failed["exit_code"]) == ("teacher_inference", reason, -9)
    assert f"error: role teacher_inference {reason}" in err
    log = (run_dir / "logs" / "launcher.log").read_text()
    assert restart_lines(log, "inference") == [("failed (exit code -9, killed by SIGKILL)", "1 of 2")]
    hung = "hung (no answer to /health for 10 s)"
    assert restart_lines(log, "teacher_inference") == [
        ("failed (exit code -9, killed by SIGKILL)", "1 of 2"),
        (hung, "2 of 2"),
    ]
    assert max(restart_counts(run_dir, "inference")) == 1 and max(restart_counts(run_dir, "teacher_inference")) == 2
    assert not [r for r, pgid in started_roles(run_dir).items() if group_alive(pgid)]
    assert not marked_processes(str(run_dir.resolve()))
    assert RunDir(run_dir).latest_checkpoint() >= 10
    assert train_steps(run_dir) == list(range(len(train_steps(run_dir))))  # every step once, through the restarts
    train = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in train if "loss" in r]
    # the verifier is never called, the teacher scores every step, its rollouts cut at the context's end
    assert all(r["verifier/calls"] == 0 and "reward/mean" not in r and "eval/reward" not in r for r in train)
    assert all(r["seq_len/truncated"] > 0.2 and r["teacher_kl"] > 0 for r in train), train


def checkpointed_past(run_dir: Path, step: int):
    return lambda: (RunDir(run_dir).latest_checkpoint() or 0) > step


def hit(run_dir: Path, proc: subprocess.Popen, sig: signal.Signals, after: int, roles: int) -> None:
    """Once this attempt has trained past a new checkpoint (and a random step more or not), send the launcher `sig`:
    it exits in bounded time (SIGKILL: its reaper stops the run), and leaves no process of the run behind."""
    at_step = after + random.randint(3, 4)  # at least one checkpoint (every 2 steps) past the attempt's start
    marker = str(run_dir.resolve())

    def trained() -> bool:
        return (RunDir(run_dir).latest_checkpoint() or 0) >= after + 2 and len(train_steps(run_dir)) >= at_step

    wait_until(trained, proc, 300, f"step {at_step}")
    if sig == signal.SIGKILL:
        assert marked_processes(marker)  # the servers, orchestrator and trainer run
        proc.kill()
    else:
        proc.send_signal(sig)
    hit_at = time.monotonic()
    proc.communicate(timeout=60)
    stopped_s = time.monotonic() - hit_at
    if sig == signal.SIGKILL:  # no launcher left to stop them: its reaper does, and a server forked by the server
        # factory (which /proc shows with the factory's environment) stops itself

        def left() -> bool:
            groups = started_roles(run_dir).values()
            return bool(marked_processes(marker) or reapers(marker) or any(map(group_alive, groups)))

        while left() and time.monotonic() - hit_at < 15:
            time.sleep(0.2)
        assert not reapers(marker)
    else:
        assert proc.returncode == 128 + sig and stopped_s < STOPS_WITHIN_S, (proc.returncode, stopped_s)
        assert (outcome(run_dir)["status"], outcome(run_dir)["signal"]) == ("stopped", sig.name)
    started = started_roles(run_dir)
    assert len(started) == roles and not [r for r, pgid in started.items() if group_alive(pgid)]
    assert not marked_processes(marker), f"processes of the run outlived the launcher's {sig.name}"


@pytest.mark.vllm
@pytest.mark.timeout(300)
def test_a_server_that_is_not_ready_in_time_fails_naming_it_with_its_log(tmp_path, monkeypatch):
    monkeypatch.delenv(
        FACTORY_ENV, raising=False
    )  # a server that imports vLLM: nothing in its log yet but the launcher's header
    started = time.monotonic()
    run = launch(tmp_path / "run", "launcher.ready_timeout_s=2")  # vLLM needs ~20 s here
    assert run.returncode == 1
    failed = outcome(tmp_path / "run")
    assert (failed["status"], failed["role"], failed["exit_code"]) == ("failed", "inference", None)  # alive, too late
    assert (tmp_path / "run" / "logs" / "inference.log").read_text().splitlines()[0] in run.stderr  # its log's tail
    assert time.monotonic() - started < 60
    assert not [r for r, pgid in started_roles(tmp_path / "run").items() if group_alive(pgid)]


class PortThief:
    """Plays a concurrent process (another launch, a torchrun) that takes a port in the gap between the moment a
    run picks it and the moment its server binds it: binds every non-zero port a run's configs name."""

    def __init__(self, root: Path):
        self.root, self.stolen, self.sockets, self.done = root, [], [], threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()

    def watch(self) -> None:
        while not self.done.wait(0.05):
            for config in self.root.glob("outputs/*/*/configs/*.yaml"):
                for port in {int(p) for p in re.findall(r"port: (\d+)", config.read_text())} - {0, *self.stolen}:
                    s = socket.socket()
                    try:
                        s.bind(("127.0.0.1", port))
                    except OSError:
                        s.close()  # the server was first
                        continue
                    self.stolen.append(port)
                    self.sockets.append(s)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()
        for s in self.sockets:
            s.close()


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_runs_started_together_all_finish_with_a_port_thief_about(tmp_path):
    """Default run dirs (no hydra.run.dir): launchers started in the same second each get their own dir and server
    ports. No port is named before its server binds it (the kernel picks it at bind), so the thief finds none."""
    # separate: runs in turns expect the cores to themselves, and these share them
    cmd = launch_cmd("max_steps=2", "orchestrator.eval.interval=0", "monitor=off", "deployment.layout=separate")
    thief = PortThief(tmp_path)
    try:
        procs = [
            subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(CONCURRENT_RUNS)
        ]
        outs = [p.communicate(timeout=840) for p in procs]
    finally:
        thief.stop()
    assert [p.returncode for p in procs] == [0] * CONCURRENT_RUNS, [err[-2000:] for _, err in outs]
    assert thief.stolen == []
    run_dirs = sorted((tmp_path / "outputs").glob("*/*"))
    assert len(run_dirs) == CONCURRENT_RUNS
    urls = {(d / "servers" / "inference.url").read_text() for d in run_dirs}
    assert len(urls) == CONCURRENT_RUNS and not any(url.endswith(":0/v1") for url in urls)
    assert all(train_steps(d) == [0, 1] for d in run_dirs)


def test_a_second_launcher_on_a_live_run_dir_is_refused(tmp_path):
    from prime_rl.launcher.run_lock import claim_run_dir

    assert claim_run_dir(tmp_path) is None  # this test process now holds the run dir
    run = subprocess.run(
        launch_cmd("launcher.dry_run=true", f"hydra.run.dir={tmp_path}"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()  # one line naming the dir and the launcher that holds it, and the fix
    assert line.startswith(f"error: run dir {tmp_path} ") and f"(pid {os.getpid()})" in line and "; fix: " in line
    assert not (tmp_path / "configs").exists()  # the live run's role configs are left alone


class FaultyEndpoint:
    """A real HTTP server answering POSTs from a script of faults: an HTTP status ("500", "529"), "garbage"
    (malformed JSON), "hang" (accepts, never answers), then "ok" (a valid one-completion reply) once the script
    runs out."""

    OK = {
        "choices": [
            {
                "index": 0,
                "text": "a",
                "token_ids": [5],
                "logprobs": {"token_logprobs": [-0.5]},
                "finish_reason": "length",
            }
        ]
    }

    def __init__(self, script: list[str]):
        self.script, self.seen = list(script), []
        endpoint = self

        class Handler(StubHandler):
            def do_POST(self):
                self.body()
                fault = endpoint.script.pop(0) if endpoint.script else "ok"
                endpoint.seen.append(fault)
                if fault == "hang":
                    time.sleep(30)
                    return
                if fault.isdigit():
                    self.reply(int(fault), b'{"error": "overloaded"}')
                    return
                self.reply(200, b'{"choices": [' if fault == "garbage" else json.dumps(endpoint.OK).encode())

        self.server = serve_stub(Handler)
        self.url = stub_url(self.server) + "/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def complete(url: str, **client_args):
    """(the completion, or the InferenceError it ended in; seconds it took; the requests the client sent)."""
    client = None

    async def go():
        nonlocal client
        client = InferenceClient(url, backoff_s=0.05, **client_args)
        try:
            return await client.complete("m", [[1, 2]], 1, Sampling(1.0, 1.0, 1))
        finally:
            await client.close()

    import asyncio

    started = time.monotonic()
    try:
        result = asyncio.run(go())
    except InferenceError as e:
        result = e
    return result, time.monotonic() - started, client.stats.requests


def test_transient_endpoint_faults_within_the_retry_budget_do_not_fail():
    endpoint = FaultyEndpoint(["500", "529", "408", "garbage", "hang"])  # 529: Anthropic's "overloaded"
    try:
        result, _, _ = complete(endpoint.url, max_retries=5, timeout_s=1.0)
    finally:
        endpoint.close()
    assert endpoint.seen == ["500", "529", "408", "garbage", "hang", "ok"]
    assert result[0][0].token_ids == [5]


def test_a_client_error_fails_at_once():
    endpoint = FaultyEndpoint(["404"])
    try:
        error, _, _ = complete(endpoint.url, max_retries=3, timeout_s=1.0)
    finally:
        endpoint.close()
    assert isinstance(error, InferenceError) and error.status == 404, error
    assert endpoint.seen == ["404"]


@pytest.mark.parametrize(
    "fault, says",
    [("500", "HTTP 500"), ("garbage", "JSONDecodeError"), ("hang", "ReadTimeout"), ("refused", "ConnectError")],
)
def test_a_persistent_endpoint_fault_fails_clearly_within_its_budget(fault, says):
    endpoint = FaultyEndpoint([fault] * 10)
    url = endpoint.url if fault != "refused" else f"http://127.0.0.1:{unused_port()}/v1"
    try:
        error, took, sent = complete(url, max_retries=2, timeout_s=0.5)
    finally:
        endpoint.close()
    assert isinstance(error, InferenceError) and says in str(error), error  # the last attempt's cause
    assert sent == 3  # the first try and two retries
    # what reached the endpoint: every request, but that a request timed out before a busy machine's stub read it
    assert endpoint.seen == [fault] * 3 if fault in ("500", "garbage") else set(endpoint.seen) <= {fault}
    assert took < 3 * 0.5 + 0.05 * (1 + 2) + 2  # three timeouts at most, the backoffs, some slack


class GroupEndpoint:
    """A real HTTP completions endpoint that answers each prompt with n one-token completions (the prompt's first
    token), records the prompts of every request, and answers the first request with `first_fault`."""

    def __init__(self, first_fault: str):
        self.requests, endpoint = [], self

        class Handler(StubHandler):
            def do_POST(self):
                body = json.loads(self.body())
                endpoint.requests.append(body["prompt"])
                if len(endpoint.requests) == 1 and first_fault == "hang":
                    time.sleep(5)
                    return
                if len(endpoint.requests) == 1 and first_fault == "500":
                    self.reply(500, b'{"error": "overloaded"}')
                    return
                choices = [
                    {
                        "index": i * body["n"] + j,
                        "text": "",
                        "token_ids": [p[0]],
                        "logprobs": {"token_logprobs": [-1.0]},
                    }
                    for i, p in enumerate(body["prompt"])
                    for j in range(body["n"])
                ]
                self.reply(200, json.dumps({"choices": choices}).encode())

        self.server = serve_stub(Handler)
        self.url = stub_url(self.server) + "/v1"


@pytest.mark.parametrize("fault", ["500", "hang"])
def test_a_failing_rollout_request_resends_its_own_groups_only(fault):
    """A step's 16 groups go out as 4 concurrent requests of 4 groups; the one that fails (or hangs past its
    timeout) is retried alone, and the groups come back complete and in order."""
    import asyncio

    from prime_rl.orchestrator.students import sample_groups

    endpoint = GroupEndpoint(fault)
    prompts = [[100 + i, 7] for i in range(16)]

    async def go():
        client = InferenceClient(endpoint.url, timeout_s=1.0, max_retries=2, backoff_s=0.05)
        try:
            return await sample_groups(client, "m", prompts, 3, Sampling(1.0, 1.0, 1), requests=4)
        finally:
            await client.close()

    try:
        groups = asyncio.run(go())
    finally:
        endpoint.server.shutdown()
    assert [[c.token_ids[0] for c in g] for g in groups] == [[p[0]] * 3 for p in prompts]
    shares = [prompts[i : i + 4] for i in range(0, 16, 4)]
    # the share that failed (the first to arrive), and nothing else, was sent again
    assert sorted(map(str, endpoint.requests)) == sorted(map(str, [*shares, endpoint.requests[0]]))


@pytest.mark.timeout(300)
def test_a_trainer_without_batches_gives_up_after_step_timeout(tmp_path):
    """step_timeout_s, not the servers' readiness timeout, bounds how long a process waits for one step."""
    from prime_rl.config import compose_config
    from prime_rl.prepare import prepare_student

    prepare_student(compose_config())
    run_dir = tmp_path / "run"
    dry = subprocess.run(
        launch_cmd("launcher.dry_run=true", "step_timeout_s=3", "monitor=off", f"hydra.run.dir={run_dir}"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dry.returncode == 0, dry.stderr[-2000:]
    config = run_dir / "configs" / "trainer.yaml"
    trainer = subprocess.run(
        [sys.executable, "-m", "prime_rl.trainer", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert trainer.returncode != 0
    error = trainer.stderr.strip().splitlines()[-1]  # the exception it died of, naming the knob that bounded it
    assert error.startswith("TimeoutError: ") and "step_timeout_s" in error, trainer.stderr[-2000:]
