"""Multi-node jobs for real (issue 72) on the local cluster's namespace nodes (`.ci/slurm up --nodes 3`,
partition `multi`): each node a network namespace with its own address and hostname, the run dir on the shared
filesystem. One SLURM job per run, one launcher task per node (srun); real vLLM servers, orchestrators and torchrun
trainers reach each other across the bridge, never over 127.0.0.1."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import yaml

from prime_rl.launcher.processes import RUN_ENV
from prime_rl.protocol.run_dir import RunDir
from prime_rl.tasks.builtin import TINY_JUDGE_RUBRIC
from tests.conftest import ROOT, launch_cmd
from tests.test_slurm import job_ids, needs_slurm, sacct, steps, sweep, sweep_dir  # noqa: F401


def partition_nodes(partition: str) -> list[str]:
    if shutil.which("sinfo") is None:
        return []
    listed = subprocess.run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N"], capture_output=True, text=True)
    return sorted(set(listed.stdout.split()))


needs_nodes = pytest.mark.skipif(
    len(partition_nodes("multi")) < 3, reason="no 3-node partition `multi`: run `.ci/slurm up --nodes 3`"
)
MULTI = ["hydra.launcher.partition=multi", "deployment=local", "debug=smoke"]
# opd's teacher, a tiny judge (tests/test_judge.py's), judges the replies too
TEACHER_JUDGES = [
    "task.verifier=judge",
    "teacher.warm_start.task=judge",
    "teacher.warm_start.steps=60",
    f"judge.rubric='{TINY_JUDGE_RUBRIC}'",
]
TWO_NODES = ["deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"]


def job_nodes(job_id: str) -> tuple[str, list[str]]:
    """(partition, hostnames) of a finished job, from accounting."""
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "partition,nodelist", "-j", job_id], capture_output=True, text=True
    ).stdout
    partition, nodelist = out.splitlines()[-1].split("|")
    hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True).stdout
    return partition, hosts.split()


def plan_of(run_dir: Path, rank: int) -> dict:
    return json.loads((run_dir / "configs" / f"plan.node{rank}.json").read_text())


def processes_of(run_dir: Path) -> list[int]:
    """Processes on any node that still carry the run's marker (all nodes share this machine's pid namespace)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_ENV, "").startswith(str(run_dir)):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_served_across_nodes(run_dir: Path, hosts: list[str]) -> None:
    """The student server on node 0, the orchestrator and trainer on node 1, and every URL the head was given
    names node 0 by its address on the bridge, not this node's loopback."""
    server, head = plan_of(run_dir, 0), plan_of(run_dir, 1)
    assert [r["name"] for r in server["roles"]] == ["inference"] and server["node"]["hostname"] == hosts[0]
    assert [r["name"] for r in head["roles"]] == ["orchestrator", "trainer"] and head["node"]["head"]
    orchestrator = yaml.safe_load((run_dir / "configs" / "orchestrator.yaml").read_text())
    urls = orchestrator["inference"]["urls"] + [s["root"] for s in head["remote_servers"]]
    assert urls and all(f"//{hosts[0]}:" in url for url in urls), urls
    assert socket.gethostbyname(hosts[0]) not in ("127.0.0.1", socket.gethostbyname(hosts[1]))


@needs_slurm
@needs_nodes
@pytest.mark.slurm
@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_a_sweep_of_two_rl_jobs_on_two_nodes_each_hands_weights_over_by_files_and_by_gloo(sweep_dir):
    # a CPU of a node each: the two jobs run at once, on four node slots of three nodes
    done = sweep(
        sweep_dir, *MULTI, *TWO_NODES, "hydra.launcher.cpus_per_task=1", "inference.weight_transfer=files,gloo"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (array,) = job_ids(sweep_dir)
    states = sacct(array, tasks=2)
    assert sorted(s[-1] for s in states.values()) == ["COMPLETED", "COMPLETED"], states
    for point, way in enumerate(["files", "gloo"]):
        run_dir = sweep_dir / str(point)
        partition, hosts = job_nodes(f"{array}_{point}")
        assert partition == "multi" and len(hosts) == 2
        assert_served_across_nodes(run_dir, hosts)
        rows = metrics(run_dir)
        assert steps(run_dir) == [0, 1, 2, 3] and rows[-1].get("eval/reward") is not None
        trained = [row for row in rows if "loss" in row]
        assert len(trained) == 3
        # how the trained versions reached node 0's server: pushed over gloo each step, or reloaded from the
        # shared run dir (between two generations, where the orchestrator needs a newer one)
        if way == "gloo":
            assert all(row["time/push"] > 0 for row in trained), trained
        else:
            assert any(row["time/reload"] > 0 for row in trained[1:]) and "time/push" not in trained[0], trained
        assert processes_of(run_dir) == []


class BatchKeeper:
    """Hard links to every batch the orchestrator hands the trainer, which deletes each once trained on: the test
    trains one process on the same batches afterwards."""

    def __init__(self, run_dir: Path, kept: Path):
        self.source, self.kept = run_dir / "rollouts", kept
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.keep, daemon=True)

    def keep(self) -> None:
        self.kept.mkdir(parents=True)
        while not self.stop.wait(0.02):
            for batch in self.source.glob("step_*") if self.source.is_dir() else []:
                target = self.kept / batch.name
                if not target.exists():
                    try:
                        os.link(batch, target)
                    except FileNotFoundError:  # trained on and deleted in between: the test then fails, not hangs
                        pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()


def train_alone(run_dir: Path, batches: Path, replay: Path) -> list[dict]:
    """The run's trainer config as one process on one node, over the run's batches: its metrics rows."""
    cfg = yaml.safe_load((run_dir / "configs" / "trainer.yaml").read_text())
    cfg["run_dir"] = str(replay)
    cfg["deployment"] |= {"num_infer_nodes": 0, "num_train_nodes": 0}
    shutil.copytree(batches, replay / "rollouts")
    (replay / "configs").mkdir()
    (replay / "configs" / "trainer.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "prime_rl.trainer", "--config", str(replay / "configs" / "trainer.yaml")]
    trained = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    return metrics(replay)


@needs_slurm
@needs_nodes
@pytest.mark.slurm
@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_opd_on_three_nodes_with_a_local_teacher_trains_over_two_nodes_as_one_process_does(sweep_dir, tmp_path):
    """The teacher on node 0 also judges every reply (task.verifier=judge: the verdicts cross nodes to the
    orchestrator on the head), and the trainer over nodes 1 and 2 trains on its batches as one process does."""
    overrides = ["training_mode=opd", "teacher=local_vllm", "deployment.num_infer_nodes=1", *TEACHER_JUDGES]
    with BatchKeeper(sweep_dir / "0", tmp_path / "batches"):
        done = sweep(sweep_dir, *MULTI, *overrides, "deployment.num_train_nodes=2")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = sweep_dir / "0"
    (job,) = job_ids(sweep_dir)
    _, hosts = job_nodes(job)
    assert len(hosts) == 3
    servers = plan_of(run_dir, 0)
    assert [r["name"] for r in servers["roles"]] == ["inference", "teacher_inference"]
    # the trainer: one torchrun over nodes 1 and 2, its rendezvous on the head (node 1)
    for rank in (1, 2):
        (trainer,) = [r for r in plan_of(run_dir, rank)["roles"] if r["name"] == "trainer"]
        assert "--nnodes 2" in " ".join(trainer["command"]) and f"{hosts[1]}:" in " ".join(trainer["command"])
    two_nodes = {row["step"]: row for row in metrics(run_dir) if "loss" in row}
    assert sorted(two_nodes) == [0, 1, 2] and all(row["teacher_kl"] > 0 for row in two_nodes.values())
    for row in two_nodes.values():  # a verdict for each sample, none lost on the way
        assert row["judge/calls"] > 0 and row["judge/failed"] == 0 and row["time/judge"] > 0, row
    alone = {row["step"]: row for row in train_alone(run_dir, tmp_path / "batches", tmp_path / "replay")}
    for step, row in two_nodes.items():
        for key in ("loss", "entropy", "teacher_kl", "grad_norm", "tokens"):
            assert alone[step][key] == pytest.approx(row[key], rel=1e-4, abs=1e-6), (step, key)
    assert processes_of(run_dir) == []


def launcher_pid(run_dir: Path, rank: int) -> int:
    """The pid of node `rank`'s launcher (the task srun started there), from its lock file."""
    return int((run_dir / f"launcher.node{rank}.lock").read_text().split()[0])


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return value


def checkpointed(run_dir: Path, step: int) -> bool:
    return (run_dir / "checkpoints" / f"step_{step}" / "STABLE").exists()


def ended(job: str) -> bool:
    return sacct(job, settle_s=0)[job][-1] not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED")


def requeue(job: str, run_dir: Path) -> int:
    """Once the job and every process of its run have ended: requeued, as a preemption or `scontrol requeue` would;
    the step of the checkpoint it will resume from."""
    wait_for(lambda: not processes_of(run_dir), 60, "the run's processes to end on every node")
    wait_for(lambda: ended(job), 180, f"job {job} to end")
    subprocess.run(["scontrol", "requeue", job], check=True)
    return RunDir(run_dir).latest_checkpoint()


@contextmanager
def link_cut(host: str):
    """The link between node `host` (node<k>) and the bridge down: its packets go nowhere (no refusal)."""
    veth = f"prime-rl-v{host.removeprefix('node')}"  # the bridge's end of the node's pair (.ci/slurm)
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)


@needs_slurm
@needs_nodes
@pytest.mark.slurm
@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_a_node_killed_or_cut_off_ends_the_job_naming_it_and_each_requeued_attempt_resumes(sweep_dir):
    """One run, three attempts: node 0's launcher SIGKILLed after the first checkpoint; requeued, it resumes, and
    node 0's link is cut after its next checkpoint; requeued again, it resumes and finishes. Each fault ends the
    attempt within seconds, names node 0, and leaves no process on any node. (A step takes ~0.4 s: 30 steps leave
    each fault time to land mid-run.)"""
    run_dir = sweep_dir / "0"
    overrides = [*MULTI, *TWO_NODES, "max_steps=30", "ckpt.interval=2", "orchestrator.eval.interval=0"]
    started = subprocess.Popen(
        launch_cmd("-m", "hydra/launcher=slurm", *overrides, f"hydra.sweep.dir={sweep_dir}"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: checkpointed(run_dir, 2), 300, "the checkpoint of step 2")
    killed_at = time.monotonic()
    os.kill(launcher_pid(run_dir, 0), signal.SIGKILL)  # its server goes with it (the reaper), mid-generation
    _, err = started.communicate(timeout=120)
    assert started.returncode != 0 and time.monotonic() - killed_at < 60
    [line] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "on node 0 stopped" in line, err[-3000:]  # the head's view: node 0's server is gone
    (job,) = job_ids(sweep_dir)
    resumed_from = requeue(job, run_dir)

    wait_for(lambda: checkpointed(run_dir, resumed_from + 2), 300, "the requeued attempt's next checkpoint")
    _, hosts = job_nodes(job)
    with link_cut(hosts[0]):
        cut_at = time.monotonic()
        wait_for(lambda: RunDir(run_dir).read_outcome(1).get("status") == "failed", 90, "the head to fail")
        assert time.monotonic() - cut_at < 60
        wait_for(lambda: not processes_of(run_dir), 60, "the cut node to stop its own processes")
    head = RunDir(run_dir).read_outcome(1)
    wait_for(lambda: RunDir(run_dir).read_outcome(0), 60, "node 0's launcher to record how it ended")
    assert head["role"].startswith("inference@") and "on node 0 stopped answering" in head["reason"], head
    assert RunDir(run_dir).read_outcome(0)["reason"] == head["reason"] + " (reported by node 1)"
    resumed_from = requeue(job, run_dir)

    wait_for(lambda: sacct(job, settle_s=0)[job][-1] == "COMPLETED", 300, "the last attempt to finish")
    assert plan_of(run_dir, 1)["resume_from"] == resumed_from > 2  # the last attempt's plan
    assert steps(run_dir) == list(range(30))  # every step exactly once across the attempts
    assert processes_of(run_dir) == []
