"""An evaluation, top to bottom: the configs and the models to evaluate found and checked (one-line errors, before any
server starts), the checkpoints that have no export exported, the student's server started from the launcher's plan
(or a standing one used), then each model loaded into it as the run's orchestrator loads weights and evaluated on
each task by the training eval's own code (orchestrator/evaluation.py): the same verifiers, sampling and metrics."""

import asyncio
import os
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from prime_rl.config.judge import judged_sources
from prime_rl.config.schema import Config
from prime_rl.config.user_error import ConfigError, UserError
from prime_rl.eval.configs import run_overrides, student_only, task_configs, teacher_as_student
from prime_rl.eval.harness import check_harness, harness_rows
from prime_rl.eval.subjects import Subject, find_subjects
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.preflight.tasks import check_eval_prompts
from prime_rl.launcher.server_handle import ServerHandle, command_plan, student_server
from prime_rl.launcher.validation import launch_config
from prime_rl.models import student_dir
from prime_rl.monitor.wandb_mode import settle_wandb_mode
from prime_rl.protocol.run_dir import RunDir
from prime_rl.protocol.servers import SERVER_KEY_ENV


@dataclass
class Request:
    run: Path | None  # the run dir whose models are evaluated (None: the config's model)
    steps: list[str]  # start, latest, merged, N
    tasks: list[str]  # task group options ([]: the run's, or the config's, own task)
    overrides: list[str]  # Hydra overrides on top of the run's
    out: Path | None  # the evaluation's own dir (None: <run>/evals/<time>, or outputs/evals/<time>)
    teacher: bool = False  # evaluate the run's local teacher instead of its student (no steps)
    harness: list[str] = field(default_factory=list)  # lm-eval tasks, beside `tasks`
    harness_include: Path | None = None  # a dir of lm-eval task YAMLs (the user's own tasks)
    harness_api: str = "chat"  # chat (the server applies the chat template) | completions (raw text, loglikelihood)


@dataclass(frozen=True)
class Checked:
    """A request found and checked: what it evaluates, on what, under which config, written where."""

    cfg: Config  # the student's config (the run's model, or its teacher's), stripped to its one server
    out: Path  # the evaluation's own dir
    subjects: list[Subject]  # the models, in order
    tasks: dict[str, Config]  # the tasks by the name their rows take


def check_request(req: Request, here: bool = True) -> Checked:
    """The request's configs and models found and checked: one-line UserErrors, nothing started or written. `here`:
    it runs on this machine (else on a SLURM node that gets the student's GPUs, and checks them there)."""
    base = run_overrides(req.run) + req.overrides
    cfg = launch_config(base, as_launched=True)  # the model: the run's, whatever task it is evaluated on
    out = (req.out or default_out(req.run)).resolve()
    subjects = find_subjects(req.run, req.steps, cfg.model.name, RunDir(out), req.teacher)
    cfg = student_only(teacher_as_student(cfg) if req.teacher else cfg)
    if here:
        check_student_gpus(cfg)
    tasks = task_configs(base, req.tasks)
    for name, task in tasks.items():
        check_eval_prompts(task.task)
        check_not_judged(name, task)
    if req.harness:
        check_harness(req.harness, req.harness_include)
    return Checked(cfg, out, subjects, tasks)


def check_not_judged(name: str, task: Config) -> None:
    """An evaluation serves the student alone: no judge's server is there to give a judged task's rewards."""
    keys = [key for _, key, _ in judged_sources(task)]
    if keys:
        raise ConfigError(
            keys,
            f"task {name}'s rewards come from a judge, and an evaluation serves the student alone",
            "evaluate on a task verified by code (--task), or judge it during the run (orchestrator.eval.tasks)",
        )


def check_student_gpus(cfg: Config) -> None:
    asked, visible = cfg.deployment.num_infer_gpus, len(visible_gpus())
    if asked > visible:
        raise UserError(
            f"deployment.num_infer_gpus={asked}: the student's server takes {asked} GPUs but {visible} are visible "
            "here; fix: evaluate where they are (CUDA_VISIBLE_DEVICES), or on SLURM with hydra/launcher=slurm_gpu",
            ["deployment.num_infer_gpus"],
        )


def evaluate_request(req: Request) -> tuple[Config, Path, list[dict]]:
    """The result rows, one per model and task, the dir they were evaluated in and the config they were under."""
    checked = check_request(req)
    out, subjects = checked.out, checked.subjects
    cfg = settle_wandb_mode(checked.cfg, out, lambda line: print(line, file=sys.stderr, flush=True))
    plan = command_plan(cfg, out)
    export_checkpoints(plan.config, subjects)
    with student_server(plan) as server:  # or a standing one (inference.url), used as it is
        return plan.config, out, asyncio.run(evaluate_subjects(server, checked.tasks, subjects, req))


def default_out(run: Path | None) -> Path:
    return (run or Path("outputs")) / "evals" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")


def export_checkpoints(cfg: Config, subjects: list[Subject]) -> None:
    """Each subject found only as a checkpoint gets the export the server loads (torch imported only then)."""
    pending = [s for s in subjects if s.checkpoint is not None]
    if pending:
        from prime_rl.eval.checkpoint_export import export_checkpoint

        for s in pending:
            export_checkpoint(cfg, s.checkpoint, s.step, RunDir(cfg.run_dir))


async def evaluate_subjects(
    server: ServerHandle, tasks: dict[str, Config], subjects: list[Subject], req: Request
) -> list[dict]:
    from prime_rl.inference.server_urls import locate_servers
    from prime_rl.orchestrator.context import make_context
    from prime_rl.orchestrator.evaluation import evaluate

    cfg = await locate_servers(server.plan.config)
    contexts = {name: make_context(on_task(cfg, t)) for name, t in tasks.items()}
    client = next(iter(contexts.values())).student
    rows = []
    try:
        for subject in subjects:
            model = await server.load(client, subject.weights, subject.adapter)
            for name, ctx in contexts.items():
                ctx.student_model = model
                start = time.monotonic()
                metrics = await evaluate(ctx)
                row = {"model": subject.label, "step": subject.step, "task": name, **metrics}
                rows.append({**row, "time_s": time.monotonic() - start})
            if req.harness:
                rows += await harness(cfg, req, subject, model)
    finally:
        for ctx in contexts.values():
            ctx.verification.close()
            await ctx.student.close()
    return rows


async def harness(cfg: Config, req: Request, subject: Subject, model: str) -> list[dict]:
    """The served model's lm-eval rows, on a thread of its own: lm-eval runs its own event loop."""
    url, key = cfg.inference.urls[0], os.environ[SERVER_KEY_ENV]
    served = {"url": url, "model": model, "tokenizer": str(student_dir(cfg)), "key": key}
    limit, length = cfg.orchestrator.eval.num_examples, cfg.inference.max_model_len
    start = time.monotonic()
    found = await asyncio.to_thread(
        harness_rows, req.harness, req.harness_include, req.harness_api, served, limit, length
    )
    took = (time.monotonic() - start) / len(found)
    return [{"model": subject.label, "step": subject.step, **row, "time_s": took} for row in found]


def on_task(cfg: Config, task: Config) -> Config:
    """The served model's config on another task: that task's data, verifier and sampling (a task may set its
    max_tokens), the model pinned to the served one (a built-in student's dir depends on the task it was made for)."""
    model = replace(cfg.model, path=str(student_dir(cfg)))
    return replace(cfg, model=model, task=task.task, orchestrator=task.orchestrator)
