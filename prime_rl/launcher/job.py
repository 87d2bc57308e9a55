"""One job, start to finish: typed config -> job-time checks -> the models built -> plan -> (dry run: print and
stop) -> supervised run.

The launch's checks ran once before the job was started or submitted (launcher/validation.py); here run only
those that depend on where the job runs (launcher/preflight/ `check_at_job`). A UserError ends the job with one
`error:` line and exit code 2 (config/user_error.py `run_or_exit`).
"""

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from prime_rl.config import Config, ConfigError, to_config
from prime_rl.config.layout import cores, gpu_shares, is_colocated, on_gpu, pushes_weights, turns
from prime_rl.config.modes import run_modes
from prime_rl.config.teachers import local_teachers, teacher_key, teacher_view
from prime_rl.config.timeouts import with_ready_timeout
from prime_rl.config.user_error import UserError, run_or_exit
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.multinode import build_node_plan, lock_name, nodes_of_job
from prime_rl.launcher.outcomes import recorded_failure
from prime_rl.launcher.plan import Plan, build_plan, write_role_configs
from prime_rl.launcher.preflight import check_at_job, check_with_student_tokenizer
from prime_rl.launcher.resume import prepare_resume
from prime_rl.launcher.run_lock import claim_run_dir
from prime_rl.launcher.slurm import requeued
from prime_rl.launcher.weights_dir import link_weights, unlink_weights, weights_home
from prime_rl.models import student_dir, teacher_dir
from prime_rl.models.hub import HubModelError, resolve_hub_models
from prime_rl.protocol.metrics import read_rows
from prime_rl.protocol.run_dir import RunDir

console = Console(stderr=True)


def typed_config(cfg: DictConfig) -> Config:
    """The typed config of a composed DictConfig; a ConfigError names the key that does not fit the schema."""
    try:
        return to_config(cfg)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError([key], str(e).splitlines()[0], f"give {key} a valid value") from e


def warn(message: str) -> None:
    console.print(message, markup=False, highlight=False, soft_wrap=True)


def run_job(cfg: DictConfig) -> None:
    run_or_exit(lambda: job(cfg))


def job(cfg: DictConfig) -> None:
    typed = with_sweep_names(typed_config(cfg), HydraConfig.get())
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    holder = claim_run_dir(run_dir, lock_name(typed))
    if holder:
        raise UserError(
            f"run dir {run_dir} is in use by another launcher (pid {holder}); "
            "fix: wait for it to end, or give this run its own hydra.run.dir"
        )
    if requeued(run_dir):  # a SLURM job's next attempt continues from the latest checkpoint in its run dir
        typed.ckpt.resume = True
    nodes = nodes_of_job(typed)  # a sweep's job checks here what a single run's validation did (launcher/validation.py)
    typed = with_hub_snapshots(check_at_job(typed, run_dir.resolve(), warn))
    alignments = {}  # by opd teacher: how its scores meet the student's tokens, and why
    if not typed.launcher.dry_run:
        prepare_models(typed)
        if not typed.launcher.prepare_only:  # needs the student's tokenizer; before anything is written or started
            typed, alignments = check_with_student_tokenizer(typed)
    plans = planned(typed, run_dir, nodes, alignments)
    if typed.launcher.dry_run or typed.launcher.prepare_only:
        return
    code = run_restarting(plans[0], lambda: planned(resumed(typed), run_dir, nodes, alignments)[0])
    if code:  # only on failure: a finished job returns, so a local multirun goes on to its next job
        end_failed_job(plans[0], code)


def planned(cfg: Config, run_dir: Path, nodes, alignments: dict) -> list[Plan]:
    """The job's plans (launcher/plan.py), their role configs written and each printed."""
    plans = plans_of_job(with_ready_timeout(cfg, server_model_dirs(cfg)), run_dir, nodes)
    for plan in plans:
        plan.teacher_alignment = alignments
        write_role_configs(plan)
        print_plan(plan)
    return plans


def resumed(cfg: Config) -> Config:
    return replace(cfg, ckpt=replace(cfg.ckpt, resume=True))


def run_restarting(plan: Plan, resumed_plan: Callable[[], Plan]) -> int:
    """Run the plan; a run whose role crashed after it trained a step restarts from its latest checkpoint (the
    plan `resumed_plan` gives), up to launcher.restarts times, as a SLURM requeue would."""
    run_dir, budget = RunDir(plan.run_dir), plan.config.launcher.restarts
    start = (run_dir.latest_checkpoint() or 0) if plan.config.ckpt.resume else 0
    code = run(plan)
    for restart in range(1, budget + 1):
        why = restart_reason(plan, code, start)
        if why is None:
            break
        start = run_dir.latest_checkpoint() or 0
        console.print(f"restarting the run from step {start} (restart {restart} of {budget}): {why}")
        plan = resumed_plan()
        code = run(plan)
    return code


def restart_reason(plan: Plan, code: int, start: int) -> str | None:
    """Why the attempt that ended with `code` may restart: a role failed (not a user's mistake: exit 2 would come
    again, nor a stop the user asked for) after it trained a step from where the attempt started (a failure before
    any step would come again too). None: it may not. A multi-node job is SLURM's to requeue."""
    if code == 0 or plan.node.multi or RunDir(plan.run_dir).read_outcome().get("exit_code") == 2:
        return None
    failure = recorded_failure(plan.run_dir, None)
    return failure if failure and trained_from(RunDir(plan.run_dir), start) else None


def trained_from(run_dir: RunDir, step: int) -> bool:
    """Whether metrics.jsonl has a trained step (a row with the trainer's loss) from `step` on; a line a killed
    process left half-written is no row."""
    return any("loss" in row and row.get("step", -1) >= step for row in read_rows(run_dir.metrics))


class JobFailed(Exception):
    """A role of a SLURM job's run failed: raised, not exited, so that submitit records it for the sweep at once."""


def end_failed_job(plan: Plan, code: int) -> None:
    """Exit with the run's code; in a SLURM job whose run failed, raise instead. submitit records an exception in
    the job's result file, which the waiting sweep reads within a second; after a plain exit the sweep learns of
    the failure from accounting, which submitit polls ever less often as the job ages (up to every 10 min)."""
    failure = recorded_failure(plan.run_dir, plan.node.rank if plan.node.multi else None)
    if "SUBMITIT_EXECUTOR" in os.environ and failure:
        raise JobFailed(f"error: {failure}")
    sys.exit(code)


def with_hub_snapshots(cfg: Config) -> Config:
    """`cfg` with each Hub model resolved to its snapshot, once, here: every process then loads the same snapshot and
    none downloads (a dry run downloads nothing)."""
    try:
        return resolve_hub_models(cfg, download=not cfg.launcher.dry_run)
    except HubModelError as e:
        raise UserError(
            f"model unavailable [model.name, teacher.model]: {e}; fix: download it where the cache is shared"
        ) from e


def prepared(cfg: Config) -> Config:
    """As the job: the Hub models resolved, the student built (once, then cached), the checks that need its
    tokenizer, and the servers' ready timeout resolved."""
    cfg = with_hub_snapshots(cfg)
    prepare_models(cfg)
    cfg, _ = check_with_student_tokenizer(cfg)
    return with_ready_timeout(cfg, server_model_dirs(cfg))


def plans_of_job(cfg: Config, run_dir: Path, nodes: tuple[list[int], list[str], str] | None) -> list[Plan]:
    """The job's plan; multi-node, this node's (a dry run outside SLURM: every node's)."""
    if nodes is None:
        return [build_plan(cfg, run_dir, visible_gpus())]
    ranks, hostnames, attempt = nodes
    return [build_node_plan(cfg, run_dir, visible_gpus(), rank, hostnames, attempt) for rank in ranks]


def with_sweep_names(cfg: Config, hydra_cfg: DictConfig) -> Config:
    """In a multirun, W&B group = the sweep and name = the job's overrides, unless the user set them.
    The group is the sweep dir's last two parts: Hydra's default `multirun/<date>/<time>` needs both."""
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return cfg
    w, sweep = cfg.monitor.wandb, Path(hydra_cfg.sweep.dir)
    wandb = replace(
        w, group=w.group or f"{sweep.parent.name}/{sweep.name}", name=w.name or hydra_cfg.job.override_dirname or None
    )
    return replace(cfg, monitor=replace(cfg.monitor, wandb=wandb))


def server_model_dirs(cfg: Config) -> list[Path]:
    """The model dirs the servers read (a dry run's Hub model that is not downloaded, or a built-in model not built
    yet, counts nothing toward the ready timeout: the latter is small)."""
    return [student_dir(cfg), *(teacher_dir(teacher_view(cfg, name)) for name in local_teachers(cfg))]


def prepare_models(cfg: Config) -> None:
    """Build what the servers need (the built-in models; once, then cached)."""
    from prime_rl.prepare import prepare_student, prepare_teacher

    console.print("preparing models (built once, then cached)")
    console.print(f"student: {prepare_student(cfg)}")
    for name in local_teachers(cfg):
        console.print(f"{teacher_key(name)}: {prepare_teacher(teacher_view(cfg, name))}")


def run(plan: Plan) -> int:
    """Check the plan's GPUs, start everything, and summarise a finished run."""
    from prime_rl.launcher.supervisor import run_plan

    check_gpus(plan)
    cfg = plan.config
    run_dir = RunDir(plan.run_dir)
    if cfg.ckpt.resume and plan.node.head:  # multi-node: the head alone trims the run dir
        console.print(f"resuming from step {prepare_resume(run_dir)}")
    home = weights_home(cfg, os.environ) if plan.node.head else None
    exports = link_weights(run_dir, home) if home else None
    if exports:
        console.print(f"weights: exported to {exports} (launcher.weights_dir), linked from the run dir")
    try:
        return run_plan(plan)
    finally:
        if exports:
            unlink_weights(run_dir, exports)


def check_gpus(plan: Plan) -> None:
    """Before any server starts: whether the trainer's GPUs hold what it keeps resident (colocated: beside the
    servers' shares), and whether the student server's GPU holds a push's receive buffers beside its share."""
    from prime_rl.launcher.gpu_memory import check_colocated_gpu, check_server_push, check_trainer_gpus

    cfg = plan.config
    gpus = {r.name: r.gpus for r in plan.roles}
    if plan.one_by_one:
        check_colocated_gpu(cfg, gpus["trainer"][0], student_dir(cfg))
        return
    if gpus.get("trainer"):
        check_trainer_gpus(cfg, gpus["trainer"][0], student_dir(cfg))
    if gpus.get("inference") and pushes_weights(cfg):
        check_server_push(cfg, gpus["inference"][0], student_dir(cfg))


def print_plan(plan: Plan) -> None:
    c = plan.config
    teacher = f", teacher={c.teacher.kind.value}" if c.teacher.kind.value != "none" else ""
    modes = "|".join(mode.name for mode in run_modes(c))  # a mix's sources may train with several
    console.print(
        f"[bold]plan[/bold] training_mode={modes}{teacher}, "
        f"lora={'on' if c.trainer.lora.enabled else 'off'}, "
        f"max_steps={c.max_steps}, run dir {plan.run_dir}"
    )
    for line in layout_lines(plan):
        console.print(line, soft_wrap=True)
    if plan.dtype_choice:
        console.print(plan.dtype_choice, soft_wrap=True)
    for teacher, alignment in plan.teacher_alignment.items():
        console.print(f"{teacher} scores on {alignment}", soft_wrap=True)
    if plan.node.multi:
        n = plan.node
        console.print(f"[bold]node {n.rank}[/bold] {n.hostname}: {', '.join(n.roles)}{' (head)' if n.head else ''}")
        for server in plan.remote_servers:
            console.print(f"  waits for {server.name}: {server.root}", soft_wrap=True)
    for role in plan.roles:
        console.print(f"[bold cyan]{role.name}[/bold cyan]")
        console.print(f"  command: {' '.join(role.command)}", soft_wrap=True)
        console.print(f"  env:     {' '.join(f'{k}={v}' for k, v in role.env.items()) or '-'}", soft_wrap=True)
        console.print(f"  gpus:    {','.join(role.gpus) or 'cpu'}")
        console.print(f"  port:    {port_text(role.port)}")
        console.print(f"  log:     {role.log_file}")
        console.print(f"  config:  {role.config_file}")


def layout_lines(plan: Plan) -> list[str]:
    """Who holds the device when (in turns, or every role at once on its own share), and how weights move."""
    c = plan.config
    if is_colocated(c):
        lines = colocated_lines(plan)
    else:
        lines = ["[bold]layout[/bold] separate: every role on its own share of the devices, all at once"]
    if pushes_weights(c):
        way = c.inference.weight_transfer.value
        lines.append(f"  weights: pushed by the trainer over {way} when the orchestrator asks (no weight files)")
    return lines


def colocated_lines(plan: Plan) -> list[str]:
    c = plan.config
    device = f"GPU {plan.roles[0].gpus[0]}" if on_gpu(c) else f"the CPU ({cores()} cores)"
    lag = c.orchestrator.max_async_level
    lines = [
        f"[bold]layout[/bold] colocated on {device}: the roles take turns, each with the whole device",
        *(f"  turn {i}, {t.holder}: {', '.join(t.work)}" for i, t in enumerate(turns(c), 1)),
        f"  max_async_level={lag}: "
        + (
            "every batch comes from the newest weights"
            if lag == 0
            else f"a batch may come from weights up to {lag} step{'s' if lag > 1 else ''} "
            "old, but is never generated while the trainer runs"
        ),
    ]
    if on_gpu(c):
        shares = ", ".join(f"{k}={v:g}" for k, v in gpu_shares(c).items())
        lines.append(f"  GPU memory: {shares}; the rest holds the trainer; servers start one after another")
        lines.append("  weights: the trainer's weights/step_N files (NCCL cannot join two processes on one GPU)")
    return lines


def port_text(port: int | None) -> str:
    return {None: "-", 0: "chosen by the kernel when the server binds"}.get(port, str(port))
