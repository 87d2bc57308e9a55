"""SLURM glue around hydra-submitit-launcher: the GPU request of a job, the dry run, and requeued attempts."""

import os
import signal
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

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
