"""Sweeps through hydra-submitit-launcher on a real single-node SLURM (`.ci/slurm up`): array jobs (their points
sharing a teacher-signal store), validation before submission, requeue on timeout with resume, failed jobs
reported, and the dry run."""

import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from prime_rl.launcher.slurm import requeue_outlives_its_own_kill
from prime_rl.models.tokenizer import build_tokenizer
from tests.conftest import ROOT, launch_cmd
from tests.test_e2e_rl import launch, plan_of, rows, run_processes

needs_slurm = pytest.mark.skipif(shutil.which("sinfo") is None, reason="no SLURM: sinfo not on PATH (run .ci/slurm up)")
SHORT = ["debug=smoke"]


def sweep(sweep_dir: Path, *overrides: str, timeout: int = 540) -> subprocess.CompletedProcess:
    cmd = launch_cmd("-m", "hydra/launcher=slurm", *overrides, f"hydra.sweep.dir={sweep_dir}")
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def job_ids(sweep_dir: Path) -> set[str]:
    """SLURM ids of the jobs a sweep submitted: submitit keeps a folder per array task (<array>_<task>), or
    per job when the sweep has one point (then not an array)."""
    return {p.name.split("_")[0] for p in (sweep_dir / ".submitit").glob("*") if re.fullmatch(r"\d+(_\d+)?", p.name)}


def sacct(job_id: str, settle_s: float = 60, tasks: int = 1) -> dict[str, list[str]]:
    """Job (array task) id -> the states of its attempts, from accounting. A sweep returns once every result
    file is written, a moment before its jobs end, and accounting hears of each task a moment after it starts:
    wait (bounded) until `tasks` of them are on record and none is still pending or running."""
    deadline = time.monotonic() + settle_s
    while True:
        out = subprocess.run(
            ["sacct", "-X", "-D", "-n", "-P", "-o", "jobid,state", "-j", job_id],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        states = {}
        for line in out.splitlines():
            job, state = line.split("|")
            states.setdefault(job, []).append(state)
        settled = len(states) >= tasks and not {s[-1] for s in states.values()} & {"PENDING", "RUNNING", "COMPLETING"}
        if settled or time.monotonic() > deadline:
            return states
        time.sleep(1)


def next_job_id() -> int:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"NEXT_JOB_ID\s*=\s*(\d+)", out).group(1))


def steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def sweep_dir(tmp_path):
    """A fresh sweep dir; whatever the test leaves queued or running there is cancelled."""
    path = tmp_path / "sweep"
    yield path
    for job_id in job_ids(path):
        subprocess.run(["scancel", job_id], check=False)


@needs_slurm
@pytest.mark.slurm
@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_an_opd_sweep_is_one_array_job_whose_points_share_the_teachers_scores(sweep_dir, tmp_path):
    """Two teacher_tau points of opd on fixed completions (GKD's on_policy 0: the reference answers), one after the
    other (array parallelism 1), naming one store (teacher.cache_dir): each job trains on its own point (step 0's
    loss is teacher_tau x the same divergence), the first asks its teacher server for each answer once and the
    second asks it nothing, reading all from the store; nor does the first, resumed for a third step."""
    store = tmp_path / "store"
    overrides = [
        "training_mode=opd", "trainer.loss.distill=topk", "trainer.loss.distill_top_k=8",
        "trainer.loss.distill_kl=jsd", "modes.opd.on_policy=0", f"teacher.cache_dir={store}", "task.num_train=16",
        "orchestrator.eval.interval=0", "ckpt.interval=2",
    ]  # fmt: skip
    run = sweep(
        sweep_dir, *overrides, "trainer.loss.teacher_tau=0.3,3.0", "max_steps=2",
        "hydra.launcher.array_parallelism=1", "hydra.launcher.mem_gb=8",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    [array] = job_ids(sweep_dir)  # one array job; its tasks' records (named <array>_<task> once accounting settles)
    assert list(sacct(array, tasks=2).values()) == [["COMPLETED"]] * 2
    for i, tau in enumerate((0.3, 3.0)):
        configs = sweep_dir / str(i) / "configs"
        assert f"teacher_tau: {tau}\n" in (configs / "trainer.yaml").read_text()
        assert "training_mode: opd\n" in (configs / "orchestrator.yaml").read_text()
    first, second = ([r for r in rows(sweep_dir / str(i)) if "loss" in r] for i in (0, 1))
    assert second[0]["loss"] == pytest.approx(10 * first[0]["loss"], rel=1e-4) and first[0]["loss"] > 0
    # the 16 prompts' answers, each scored once: at the first job's first step, by its teacher's server
    assert [r["teacher/store_misses"] for r in first + second] == [16, 0, 0, 0], first + second
    assert all(r["teacher/store_hits"] == 16 for r in first[1:] + second)
    assert len(list((store / "scores").rglob("*.json"))) == 16
    # by the teacher servers' own access logs: each orchestrator probes its teacher once as it starts (prompt
    # logprobs served?); the second job's then asks nothing
    scoring = [teacher_requests(sweep_dir / str(i)) for i in (0, 1)]
    assert scoring[0] > 1 and scoring[1] == 1, scoring

    # the first point resumed, here, to a third step on the same 16 prompts: its teacher is only probed
    job = sweep_dir / "0"
    resumed = launch(job, *overrides, "trainer.loss.teacher_tau=0.3", "max_steps=3", "ckpt.resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert plan_of(job)["resume_from"] == 2
    last = [r for r in rows(job) if "loss" in r][-1]
    assert (last["step"], last["teacher/store_misses"], last["teacher/store_hits"]) == (2, 0, 16), last
    assert teacher_requests(job) == scoring[0] + 1
    assert not run_processes(str(sweep_dir))


def teacher_requests(run_dir: Path) -> int:
    """The prompt-logprob requests the run's teacher server answered, by its own access log."""
    return (run_dir / "logs" / "teacher_inference.log").read_text().count('"POST /v1/completions HTTP/1.1" 200')


@needs_slurm
@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_one_invalid_point_submits_nothing(sweep_dir):
    before = next_job_id()
    run = sweep(sweep_dir, "training_mode=rl", "trainer.loss.teacher_tau=0,0.5", *SHORT, timeout=120)
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert "sweep job #1 (training_mode=rl trainer.loss.teacher_tau=0.5" in line and "teacher_tau" in line, line
    assert next_job_id() == before and sacct(str(before), tasks=0) == {}  # queue, accounting: no job
    assert not sweep_dir.exists()


@needs_slurm
@pytest.mark.slurm
@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_a_job_that_times_out_is_requeued_and_resumes(sweep_dir):
    """The trainer is frozen after its second checkpoint, so the job hits its 2-min limit (SLURM signals it
    30 s before); submitit requeues it, and the next attempt resumes in the same run dir."""
    run_dir = sweep_dir / "0"
    proc = subprocess.Popen(
        launch_cmd(
            "-m",
            "hydra/launcher=slurm",
            "hydra.launcher.timeout_min=2",
            "hydra.launcher.signal_delay_s=30",
            "max_steps=8",
            "ckpt.interval=1",
            "orchestrator.eval.interval=0",
            "monitor.wandb.mode=offline",  # the resumed attempt continues the same W&B run
            f"hydra.sweep.dir={sweep_dir}",
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "checkpoints" / "step_2" / "STABLE").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint at step 2"
            time.sleep(0.2)
        [trainer] = run_processes(f"{run_dir}/configs/trainer.yaml")
        os.kill(trainer, signal.SIGSTOP)
        wandb_run_id = (run_dir / "wandb_run_id").read_text()
        _, err = proc.communicate(timeout=480)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    [job] = job_ids(sweep_dir)
    [attempts] = sacct(job).values()
    assert attempts[0] == "REQUEUED" and attempts[-1] == "COMPLETED", attempts
    log = "".join(p.read_text() for p in sorted((sweep_dir / ".submitit").glob("*/*_log.*")))  # all attempts
    assert "this job is timed-out" in log and "Requeued job" in log, log[-3000:]
    assert 2 <= plan_of(run_dir)["resume_from"] <= 8  # the last attempt's plan
    assert steps(run_dir) == list(range(8))  # every step exactly once across the attempts
    assert (run_dir / "wandb_run_id").read_text() == wandb_run_id  # and one W&B run
    assert sorted(p.name for p in sweep_dir.iterdir()) == [".submitit", "0", "multirun.yaml"]  # one run dir
    assert not run_processes(str(sweep_dir))


@pytest.mark.integration
def test_the_requeue_command_outlives_the_sigterm_of_its_own_requeue():
    """submitit's SIGUSR2 handler runs `scontrol requeue`, which SIGTERMs the whole job, scontrol too: here a
    command that SIGTERMs itself before it exits stands in for it. Shielded, it finishes, and the launcher's
    SIGTERM handler is back afterwards; unshielded, it dies."""
    outcomes = []

    def requeue(signum, frame):  # as submitit's handler: a command the job's end reaches before it exits
        command = "import os, signal; os.kill(os.getpid(), signal.SIGTERM); print('requeued')"
        outcomes.append(subprocess.run([sys.executable, "-c", command], capture_output=True, text=True))

    def launcher_stop(signum, frame):
        pass

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR2, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGTERM, launcher_stop)
        signal.signal(signal.SIGUSR2, requeue)
        os.kill(os.getpid(), signal.SIGUSR2)
        requeue_outlives_its_own_kill()
        os.kill(os.getpid(), signal.SIGUSR2)
        after = signal.getsignal(signal.SIGTERM)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    unshielded, shielded = outcomes
    assert unshielded.returncode == -signal.SIGTERM
    assert (shielded.returncode, shielded.stdout) == (0, "requeued\n")
    assert after is launcher_stop


@needs_slurm
@pytest.mark.slurm
@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_a_crashing_job_fails_and_its_sweep_reads_its_error_at_once(sweep_dir, tmp_path):
    not_a_model = tmp_path / "not_a_model"
    build_tokenizer().save_pretrained(not_a_model)  # the job's checks read the tokenizer: only the roles crash
    (not_a_model / "config.json").write_text('{"model_type": "no_such_architecture"}')  # passes validation
    run = sweep(sweep_dir, f"model.name={not_a_model}", *SHORT, timeout=300)
    assert run.returncode != 0
    [job] = job_ids(sweep_dir)
    assert sacct(job) == {job: ["FAILED"]}
    # every role reads the broken model dir; whichever trips first is named
    assert re.search(r"error: role (inference|orchestrator|trainer) failed", run.stderr), run.stderr[-3000:]
    # the job saved its error where the sweep reads it at once (hydra_plugins/prime_rl_slurm): not left to accounting
    [result] = (sweep_dir / ".submitit" / job).glob("*_result.pkl")
    status, trace = pickle.loads(result.read_bytes())
    assert status == "error" and "JobFailed: error: role " in trace, trace[-2000:]
    assert not run_processes(str(sweep_dir))


@needs_slurm
@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_a_two_gpu_job_gives_each_role_its_own_fake_gpu(sweep_dir):
    """The local node's 2 fake GPUs (gres): the preset asks for the deployment's 2, SLURM sets the job's
    CUDA_VISIBLE_DEVICES, and the launcher inside slices it. launcher.prepare_only: the job prints its plan,
    finds the (cached) student, and starts nothing."""
    run = sweep(
        sweep_dir,
        "deployment.num_infer_gpus=1",
        "deployment.num_train_gpus=1",
        "launcher.prepare_only=true",
        'hydra.launcher.setup=["echo job CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"]',
        timeout=170,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    log = "".join(p.read_text() for p in sorted((sweep_dir / ".submitit").glob("*/*_log.*")))
    visible = re.search(r"job CUDA_VISIBLE_DEVICES=(\S*)", log).group(1).split(",")
    assert len(visible) == 2, log[-3000:]
    gpus = {
        role: re.search(rf"^{role}\n(?:  .*\n)*?  gpus: +(\S+)$", log, re.M).group(1)
        for role in ("inference", "trainer", "orchestrator")
    }
    assert gpus == {"inference": visible[0], "trainer": visible[1], "orchestrator": "cpu"}, log[-3000:]
    assert f"CUDA_VISIBLE_DEVICES={visible[1]}" in log  # the trainer's env


@pytest.mark.integration
def test_slurm_dry_run_prints_the_submission_and_submits_nothing(tmp_path):
    run = subprocess.run(
        launch_cmd(
            "-m",
            "hydra/launcher=slurm_gpu",
            "deployment=gpu",
            "training_mode=opd",
            "deployment.num_teacher_gpus=1",
            "trainer.loss.teacher_tau=0.1,1.0",
            "launcher.dry_run=true",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    submission = yaml.safe_load(run.stdout)
    sbatch, jobs = submission["sbatch"], submission["jobs"]
    assert sbatch["gpus_per_node"] == 3  # inference 1 + trainer 1 + teacher 1
    assert (sbatch["cpus_per_task"], sbatch["mem_gb"], sbatch["nodes"]) == (24, 192, 1)  # 8 CPUs, 64 GB per GPU
    assert [job["run_dir"] for job in jobs] == [str(tmp_path / "sweep" / str(i)) for i in range(2)]
    assert [o for o in jobs[1]["overrides"] if o.startswith("trainer.")] == ["trainer.loss.teacher_tau=1.0"]
    assert not (tmp_path / "sweep").exists()


@needs_slurm
@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_a_job_the_partition_can_never_run_is_refused_before_submission(sweep_dir):
    """Two nodes asked of the one-node default partition: SLURM's own `sbatch --test-only` says no, before any job."""
    first = next_job_id()
    done = sweep(sweep_dir, "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1", timeout=100)
    assert done.returncode == 2, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert "SLURM cannot run" in line and "2 node(s)" in line and "nothing was submitted" in line, line
    recorded = subprocess.run(
        ["sacct", "-X", "-n", "-j", f"{first},{next_job_id() - 1}"], capture_output=True, text=True
    )
    assert recorded.stdout.strip() == "" and not sweep_dir.exists()  # `--test-only` takes an id, submits nothing


@needs_slurm
@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_a_pending_job_shows_why_and_its_cancel_ends_the_wait(sweep_dir):
    """A job held back (here: not before an hour from now) is reported with SLURM's reason while the sweep waits;
    `scancel` ends the wait within seconds (submitit alone would look again after up to minutes)."""
    cmd = launch_cmd(
        "-m",
        "hydra/launcher=slurm",
        "+hydra.launcher.additional_parameters.begin=now+3600",
        f"hydra.sweep.dir={sweep_dir}",
    )
    waiting = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in waiting.stdout:  # where Hydra logs
        lines.append(line)
        if "is pending (BeginTime)" in line:
            break
    else:
        pytest.fail("".join(lines)[-3000:])
    (job,) = job_ids(sweep_dir)
    cancelled = time.monotonic()
    subprocess.run(["scancel", job], check=True)
    rest = waiting.communicate(timeout=90)[1]
    assert waiting.returncode == 2 and time.monotonic() - cancelled < 45
    [line] = [line for line in rest.splitlines() if line.startswith("error: ")]
    assert f"sweep job {job} ended without a result (CANCELLED" in line, line
