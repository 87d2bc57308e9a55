"""The configs an evaluation runs under: a run's own (its Hydra overrides, read from the run dir) with the command
line's overrides on top, once per task named, each composed and checked as `python launch.py` would, and stripped to
the student: an evaluation starts the student's server only, whatever teachers or reference the run had."""

from dataclasses import replace
from pathlib import Path

import yaml

from prime_rl.config.schema import Config, Layout, TeacherConfig, TeacherKind
from prime_rl.config.sources import source_label
from prime_rl.config.user_error import UserError
from prime_rl.launcher.validation import launch_config

RUN_OVERRIDES = Path(".hydra") / "overrides.yaml"  # Hydra's record of a run's command line, in its run dir


LAUNCH_ONLY = ("inference.url=", "launcher.")  # how that launch ran (a standing server it used), not what it trained


def run_overrides(run: Path | None) -> list[str]:
    """The overrides the run at `run` was launched with, but those of the launch alone ([] without a run)."""
    if run is None:
        return []
    path = run / RUN_OVERRIDES
    if not path.is_file():
        raise UserError(
            f"--run {run}: not a run dir of launch.py (no {RUN_OVERRIDES}); fix: give the dir a run or a "
            "sweep point wrote (outputs/<date>/<time>, multirun/<date>/<time>/<n>)",
            ["--run"],
        )
    return [o for o in yaml.safe_load(path.read_text()) or [] if not o.lstrip("+~").startswith(LAUNCH_ONLY)]


def task_configs(base: list[str], tasks: list[str]) -> dict[str, Config]:
    """By the name its results take, one checked config per task (`task=<option>` over `base`), or the base's own
    task where none is named (named as a mix source would be: its dataset, taskset, file or kind)."""
    if not tasks:
        cfg = student_only(launch_config(base, as_launched=True))
        return {source_label(cfg.task): cfg}
    return {t: student_only(launch_config([*base, f"task={t}"], as_launched=True)) for t in tasks}


def teacher_as_student(cfg: Config) -> Config:
    """The run's local teacher in the student's place: its model is the one served and evaluated."""
    t = cfg.teacher
    if t.kind != TeacherKind.local_vllm:
        raise UserError(
            f"--teacher: the run's teacher is {t.kind.value}, not a model this command serves (only local_vllm); "
            "fix: evaluate a model dir or Hub id with model.name=<it> (an external teacher's level is the run's own "
            "eval/teacher_reward)"
        )
    model = replace(cfg.model, name=t.model, revision=t.revision, path=t.path, warm_start=t.warm_start)
    return replace(cfg, model=model)


def student_only(cfg: Config) -> Config:
    """No teacher, no served reference, and the deployment of the student's server alone on one node: nothing but
    that server is planned, given GPUs or waited for."""
    loss = replace(cfg.trainer.loss, kl_ref_tau=0.0)
    d = cfg.deployment
    alone = replace(
        d,
        num_train_gpus=d.num_train_gpus if d.layout == Layout.colocated else 0,  # colocated: the one shared GPU
        num_teacher_gpus=None,
        num_infer_nodes=0,
        num_train_nodes=0,
    )
    return replace(cfg, teacher=TeacherConfig(), teachers={}, trainer=replace(cfg.trainer, loss=loss), deployment=alone)
