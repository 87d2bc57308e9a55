"""A saved W&B workspace (wandb-workspaces) made for a sweep, its runs one line per sweep point coloured by the swept
keys, or for one run; panels by family. Built from what the sweep or run dir holds; pushed only where W&B is
online."""

from pathlib import Path

from omegaconf import OmegaConf

from prime_rl.config.extras import import_extra
from prime_rl.config.schema import WandbMode
from prime_rl.config.user_error import UserError
from prime_rl.monitor.metrics import labelled_eval_rewards
from prime_rl.monitor.wandb_mode import wandb_mode
from prime_rl.monitor.wandb_run import EVAL_STEP, RUN_ID_FILE
from prime_rl.protocol.metrics import read_rows
from prime_rl.protocol.run_dir import RunDir
from prime_rl.report.sweep import load_jobs, swept_keys

EVAL_TASKS = "eval tasks and sources"  # the section of each eval task's and each mix source's eval/<label>/reward
# section -> the metrics it plots, each in its own panel (a metric the runs never logged stays an empty panel)
SECTIONS = {
    "reward and eval": ["eval/reward", "reward/mean", "eval/exact", "reward/exact", "eval/teacher_reward"],
    "loss and masks": ["loss", "entropy", "mismatch_kl", "masked_fraction", "clipped/sequence", "grad_norm"],
    "off-policy correction": [
        "correction/token_weight_mean",
        "correction/token_weight_max",
        "correction/sequence_weight_max",
        "correction/masked_token",
        "correction/masked_sequence",
        "correction/truncated_token",
        "correction/truncated_sequence",
    ],
    "teacher": ["teacher_kl", "teacher/truncated", "teacher/requests"],
    "throughput and time": [
        "time/step",
        "time/generate",
        "time/train",
        "throughput/generate_tokens_per_s",
        "throughput/train_tokens_per_s",
        "throughput/padding_fraction",
    ],
}


def wandb_target(job_dir: Path) -> dict | None:
    """The job's W&B entity, project and group, as its trainer logged them; None when it logged nothing."""
    path = job_dir / "configs" / "trainer.yaml"
    if not path.exists():
        return None
    w = OmegaConf.load(path).monitor.wandb
    return None if w.mode == "disabled" else {"entity": w.entity, "project": w.project, "group": w.group}


def build_workspace(
    entity: str, project: str, name: str, runs: tuple[str, str], groupby: list[str], evals: list[str] = ()
):
    """The workspace object: the runs whose attribute runs[0] (W&B's "Group", "ID") is runs[1], grouped, so
    coloured, by the config keys `groupby`; `evals`: the eval/<label>/reward metrics they logged, a section."""
    wr = import_extra("wandb_workspaces.reports.v2", "report", "a W&B workspace (python -m prime_rl.report)")
    ws = import_extra("wandb_workspaces.workspaces", "report", "a W&B workspace (python -m prime_rl.report)")

    def panel(metric: str):
        return wr.LinePlot(title=metric, x=EVAL_STEP if metric.startswith("eval/") else "Step", y=[metric])

    sections = [
        ws.Section(name=name, panels=[panel(m) for m in metrics], is_open=True)
        for name, metrics in {**SECTIONS, EVAL_TASKS: list(evals)}.items()
        if metrics
    ]
    attribute, value = runs
    runset = ws.RunsetSettings(filters=[ws.Metric(attribute) == value], groupby=[ws.Config(key) for key in groupby])
    return ws.Workspace(entity=entity, project=project, name=name, sections=sections, runset_settings=runset)


def sweep_workspace(sweep_dir: Path, entity: str | None = None):
    """The sweep's workspace, or None when its jobs logged nothing to W&B. `entity`: where the jobs named none
    (W&B's default entity of the API key, known only online)."""
    jobs = load_jobs(sweep_dir)
    target = wandb_target(jobs[0].dir) if jobs else None
    if target is None or target["group"] is None:
        return None
    group = target["group"]
    evals = labelled_eval_rewards([r for job in jobs for r in job.rows])
    return build_workspace(
        target["entity"] or entity, target["project"], f"sweep {group}", ("Group", group), swept_keys(jobs), evals
    )


def run_workspace(run_dir: Path, entity: str | None = None):
    """One run's workspace (its W&B run, by the id its run dir keeps), or None when it logged nothing to W&B."""
    target, id_file = wandb_target(run_dir), run_dir / RUN_ID_FILE
    if target is None or not id_file.exists():
        return None
    run_id = id_file.read_text().strip()
    evals = labelled_eval_rewards(read_rows(RunDir(run_dir).metrics))
    return build_workspace(target["entity"] or entity, target["project"], f"run {run_id}", ("ID", run_id), [], evals)


def is_run_dir(path: Path) -> bool:
    """A single run's dir (a launch without -m), as opposed to a multirun dir of jobs."""
    return (path / "configs" / "trainer.yaml").exists()


def publish_workspace(path: Path) -> str:
    """Saves the workspace of a sweep or of a run to W&B when W&B is online here; says what happened, in one line."""
    what = "run" if is_run_dir(path) else "sweep"
    if wandb_mode(WandbMode.auto) != "online":
        return "W&B is not online here (no WANDB_API_KEY, or WANDB_MODE): no workspace pushed"
    import wandb

    make = run_workspace if what == "run" else sweep_workspace
    try:
        workspace = make(path, entity=wandb.Api().default_entity)
    except UserError as e:  # the report extra is not installed: the report itself is written all the same
        return f"no workspace pushed: {e}"
    if workspace is None:
        return f"the {what} logged nothing to W&B: no workspace"
    return f"W&B workspace: {workspace.save().url}"
