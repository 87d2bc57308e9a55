"""SLURM glue around hydra-submitit-launcher: the GPU request of a job, the dry run, what the cluster can run,
the wait for the jobs, and requeued attempts."""

import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from prime_rl.config.user_error import first_line
from prime_rl.launcher.outcomes import run_failure
from prime_rl.protocol.run_dir import RunDir


def is_slurm(master: DictConfig) -> bool:
    return str(master.hydra.launcher.get("_target_", "")).endswith(".SlurmLauncher")


def print_submission(master: DictConfig, jobs: list[tuple[list[str], Path]]) -> None:
    """What `-m hydra/launcher=slurm… launcher.dry_run=true` would submit, as YAML (what tools and tests read): the
    sbatch parameters (hydra.launcher; submitit turns them into #SBATCH flags) of one array job, a task per point."""
    params = OmegaConf.to_container(master.hydra.launcher, resolve=True)
    sbatch = {k: v for k, v in sorted(params.items()) if k != "_target_" and v not in (None, {}, [])}
    what = "one job" if len(jobs) == 1 else f"one array job of {len(jobs)} tasks"  # submitit's choice too
    if (params.get("nodes") or 1) > 1:
        what += f", each on {params['nodes']} nodes with {params.get('tasks_per_node', 1)} launcher task per node"
    points = [{"overrides": overrides, "run_dir": str(run_dir)} for overrides, run_dir in jobs]
    submission = {"sbatch": sbatch, "jobs": points}
    print(f"# SLURM dry run: {what}; nothing submitted")
    print(yaml.safe_dump(submission, sort_keys=False, width=1000), end="")


def submission_script(master: DictConfig, folder: str) -> str:
    """The sbatch script submitit writes for a job of this sweep, its #SBATCH lines from hydra.launcher as
    hydra-submitit-launcher passes them on (its queue's own keys, the rest as `slurm_<key>`)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    params = OmegaConf.to_container(master.hydra.launcher, resolve=True)
    generic = set(OmegaConf.structured(BaseQueueConf).keys())
    executor = submitit.AutoExecutor(cluster="slurm", folder=folder)
    skipped = {"_target_", "submitit_folder", "max_num_timeout"}  # not sbatch flags
    executor.update_parameters(
        **{k if k in generic else f"slurm_{k}": v for k, v in params.items() if k not in skipped}
    )
    return executor._executor._make_submission_file_text("true", "check")  # submitit 1.5's own sbatch script


def cluster_refusal(master: DictConfig) -> str | None:
    """Why SLURM could never run a job of this sweep (more nodes, GPUs, CPUs or memory than its partition has),
    in SLURM's words from `sbatch --test-only` on the job's own script; None where it can run, or where this
    machine has no sbatch (submitit then says so)."""
    if shutil.which("sbatch") is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "check.sh"
        script.write_text(submission_script(master, folder))
        try:
            checked = subprocess.run(
                ["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=SLURM_CALL_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:  # a controller that does not answer: submission will say more
            return None
    if checked.returncode == 0:
        return None
    said = [line for line in checked.stderr.splitlines() if line.strip()]
    return said[-1].strip() if said else f"sbatch --test-only exited {checked.returncode}"


def asked(master: DictConfig) -> str:
    """A sweep job's request, as a one-line error names it."""
    p = OmegaConf.to_container(master.hydra.launcher, resolve=True)
    partition = f"partition {p['partition']}" if p.get("partition") else "the default partition"
    gpus = f", {p['gpus_per_node']} GPUs" if p.get("gpus_per_node") else ""
    return f"{p.get('nodes') or 1} node(s) of {p.get('cpus_per_task')} CPUs, {p.get('mem_gb')} GB{gpus} in {partition}"


log = logging.getLogger(__name__)
WATCH_S = 5.0  # how often a waiting sweep asks SLURM about its jobs
SLURM_CALL_TIMEOUT_S = 30.0  # one sbatch/squeue call: a controller that hangs must not hang the sweep


@contextmanager
def jobs_watched() -> Iterator[None]:
    """While a sweep waits for its jobs: a pending job's reason each time it changes (a job SLURM holds back is
    seen, not waited on in silence), and submitit's view of every job refreshed each WATCH_S, so that a cancelled
    or failed job ends the wait at once (submitit's own poll comes ever more rarely as a job ages)."""
    from submitit.slurm.slurm import SlurmJob

    stop = threading.Event()

    def watch() -> None:
        said: dict[str, str] = {}
        while not stop.wait(WATCH_S):
            try:
                look(said)
            except (OSError, subprocess.SubprocessError) as e:  # the next look may do better; the wait goes on
                log.warning(f"could not ask SLURM about the sweep's jobs: {e}")

    def look(said: dict[str, str]) -> None:
        watcher = SlurmJob.watcher
        waiting = sorted(watcher._registered - watcher._finished)  # submitit 1.5's jobs of this process
        if not waiting:
            return
        watcher.update()
        for job, reason in pending_reasons(waiting).items():
            if said.get(job) != reason:
                log.info(f"job {job} is pending ({reason}); `scancel {job}` to give it up")
                said[job] = reason

    watching = threading.Thread(target=watch, name="slurm-jobs", daemon=True)
    watching.start()
    try:
        yield
    finally:
        stop.set()
        watching.join(timeout=SLURM_CALL_TIMEOUT_S)


def pending_reasons(jobs: list[str]) -> dict[str, str]:
    """Job id -> SLURM's reason for each of `jobs` that is still pending."""
    listed = subprocess.run(
        ["squeue", "-h", "-t", "PENDING", "-o", "%i|%r", "-j", ",".join(jobs)],
        capture_output=True,
        text=True,
        timeout=SLURM_CALL_TIMEOUT_S,
    )
    return dict(line.split("|", 1) for line in listed.stdout.splitlines() if "|" in line)


def unfinished_job(e: Exception, run_dirs: list[Path]) -> str:
    """One line for submitit's UncompletedJobError (a job that ended without a result: cancelled, or its first
    task killed before it could write one): the job, its state, and the failure its run recorded, or its logs."""
    said = re.search(
        r"Job (\S+) \(task: \d+\) with path (\S+)\s+has not produced any output \(state: ([^)]*)\)", str(e)
    )
    if not said:
        return f"a sweep job ended without a result: {first_line(e)}"
    job, result, state = said.groups()
    point = int(job.split("_")[1]) if "_" in job else 0  # an array's task is its sweep point
    # a cancelled job's run says nothing of the cancel (and an earlier attempt's failure would mislead)
    ran = point < len(run_dirs) and not state.startswith("CANCELLED")
    failure = run_failure(run_dirs[point]) if ran else None
    return f"sweep job {job} ended without a result ({state}): " + (failure or f"its logs: {Path(result).parent}")


def requeued(run_dir: Path) -> bool:
    """A SLURM job's later attempt (requeued after a timeout or preemption, or resubmitted into the same
    sweep dir): its run dir holds the earlier attempt's work, which it continues (ckpt.resume)."""
    if "SLURM_JOB_ID" not in os.environ:
        return False
    return int(os.environ.get("SLURM_RESTART_COUNT", "0")) > 0 or RunDir(run_dir).latest_checkpoint() is not None


def requeue_outlives_its_own_kill() -> None:
    """On SIGUSR2 (the time limit is near) submitit runs `scontrol requeue` from inside the job, and the requeue
    ends the job: SIGTERM to each of its processes, scontrol among them. Where that lands before scontrol exits,
    submitit takes the requeue as failed and records the job as failed, and the sweep stops, though SLURM did
    requeue it. So SIGTERM is ignored while submitit's handler runs, and scontrol inherits the ignore (an ignored
    signal stays ignored across exec); afterwards the launcher's own handler is back."""
    requeue = signal.getsignal(signal.SIGUSR2)
    if not callable(requeue):  # not a submitit job: SIGUSR2 means nothing here
        return

    def shielded(signum, frame):
        stop = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            requeue(signum, frame)
        finally:
            signal.signal(signal.SIGTERM, stop)

    signal.signal(signal.SIGUSR2, shielded)
