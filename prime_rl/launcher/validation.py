"""Every run and every sweep point is validated once, before anything is written, started or submitted: the
launch-time checks of launcher/preflight/, then its output dir (the job itself runs only the job-time checks).

Hydra composes the config; a bad input then exits 2 with one line naming the keys and the fix (exit_with):
- a single run: the `ValidateRun` callback (`hydra.callbacks` in conf/config.yaml), called before Hydra creates
  the run dir, so an earlier run's files there are untouched;
- a sweep (`-m`): the validating sweeper (`hydra/sweeper=validating`, hydra_plugins/prime_rl_sweeper), which
  composes and validates every point before the launcher gets any, so a typo in the last point fails in seconds
  instead of after the first jobs ran (or, on SLURM, after hours in the queue);
- a command line Hydra cannot compose (unknown key, wrong type, no such option): launch.py, from Hydra's error.
"""

import os
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.errors import HydraException, MissingConfigException
from hydra.experimental.callback import Callback
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from prime_rl.config import to_config
from prime_rl.config.extras import SLURM_PLUGIN, missing_extra
from prime_rl.config.modes import modes_with
from prime_rl.config.schema import Config, node_gpus
from prime_rl.config.store import compose_config
from prime_rl.config.user_error import UserError, exit_with, first_line
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.multinode import nodes_of_job
from prime_rl.launcher.preflight import check_at_launch
from prime_rl.protocol.run_dir import RunDir

LIST_KEYS = "`python launch.py --cfg job` prints every key with its value"


def launch_config(overrides: list[str], as_launched: bool = False) -> Config:
    """The config `python launch.py <overrides>` composes, through the launch's checks (one-line errors). With
    `as_launched`, its GPU counts are checked against what it asks, as its own launch checked them, not against this
    machine's: a run read back to serve part of it (an evaluation's student server) on other GPUs."""
    try:
        cfg = compose_config(overrides)
        check_at_launch(cfg, node_gpus(cfg.deployment) if as_launched else len(visible_gpus()))
    except (HydraException, OmegaConfBaseException) as e:
        raise hydra_error(e) from e
    return cfg


class ValidateRun(Callback):
    """A single run: its config, then its output dir."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        error = validation_error(config, len(visible_gpus()), runs_here=True)
        if error:
            exit_with(error)
        run_dir = Path(config.hydra.run.dir)
        problem = not_writable(run_dir)
        if problem:  # Hydra would fail creating it with a traceback
            exit_with(unwritable(run_dir, "hydra.run.dir", problem))
        error = reused(run_dir, config.ckpt.resume, "hydra.run.dir")
        if error:
            exit_with(error)


def sweep_points(config_loader, overrides: list[str]) -> list[list[str]]:
    """The overrides of every job of `-m a=1,2 b=x,y`, as Hydra's own basic sweeper expands them (its cartesian
    product, in its order; a key given twice counts once, its last value: `a=1,2 a=3` is one job, a=3)."""
    parsed = OverridesParser.create(config_loader=config_loader).parse_overrides(overrides)
    for o in parsed:
        if o.is_sweep_override() and not o.is_discrete_sweep():
            key = o.get_key_element()
            exit_with(f"invalid sweep [{key}]: {o.input_line} is not a list of values; fix: use {key}=a,b or range()")
    (points,) = basic_sweeper().split_arguments(parsed, max_batch_size=None)
    return points


def basic_sweeper() -> type:
    """Hydra's BasicSweeper class, found through Hydra's public plugin registry (its module is Hydra's private)."""
    return next(cls for cls in Plugins.instance().discover(Sweeper) if cls.__name__ == "BasicSweeper")


def check_sweep(config_loader, master: DictConfig, points: list[list[str]]) -> list[tuple[list[str], Path]]:
    """(a job's task overrides, its run dir) for every point; exit 2 at the first invalid one."""
    gpus, jobs = gpus_of_a_job(master), []
    for num, point in enumerate(points):
        cfg, error = compose_point(config_loader, master, point, num, gpus)
        run_dir = None if error else Path(cfg.hydra.sweep.dir) / str(cfg.hydra.sweep.subdir)
        error = error or reused(run_dir, cfg.ckpt.resume, "hydra.sweep.dir")
        if error:
            exit_with(f"sweep job #{num} ({' '.join(task_overrides(point))}): {error}; nothing was launched")
        jobs.append((task_overrides(point), run_dir))
    sweep_dir = Path(master.hydra.sweep.dir)
    problem = not_writable(sweep_dir)
    if problem:
        exit_with(unwritable(sweep_dir, "hydra.sweep.dir", problem))
    return jobs


def task_overrides(overrides: list[str]) -> list[str]:
    """The overrides that make this job what it is (hydra.* and hydra/… ones are the same for every job)."""
    return [o.input_line for o in OverridesParser.create().parse_overrides(overrides) if not o.is_hydra_override()]


# where other launchers set the mode (PRIME-RL's docs name these two as what its training_mode propagates to)
MODE_KEYS_ELSEWHERE = ("orchestrator.training_mode", "trainer.loss.type")
MODE_GROUP = "training_mode"  # the config group that picks the mode


def compose_point(config_loader, master: DictConfig, overrides: list[str], num: int, gpus: int):
    """(the job's composed config with its hydra node, None) or (None, the one-line error)."""
    try:
        cfg = config_loader.load_sweep_config(master, overrides)
    except (HydraException, OmegaConfBaseException) as e:
        return None, str(hydra_error(e))
    with open_dict(cfg.hydra.job):
        cfg.hydra.job.num = num  # as the launcher sets it: the run dir's subdir
    return cfg, validation_error(cfg, gpus)


def validation_error(cfg: DictConfig, gpus: int, runs_here: bool = False) -> str | None:
    """The one-line error of the job's config (without its hydra node, as the task function gets it); `runs_here`
    (a single run: its job runs in this process) adds what depends on where the job runs: its SLURM nodes."""
    task = OmegaConf.to_container(cfg)  # a plain copy: far cheaper than deep-copying the DictConfig
    del task["hydra"]
    try:
        typed = to_config(task)
        check_at_launch(typed, gpus)
        if runs_here:
            nodes_of_job(typed)
    except UserError as e:  # a ConfigError, or a resource the config names (a standing server)
        return str(e)
    except OmegaConfBaseException as e:
        return str(hydra_error(e))
    return None


def hydra_error(e: Exception) -> UserError:
    """One line from Hydra's and OmegaConf's multi-line errors, with the key and a fix."""
    cause = e.__cause__ or e
    key = getattr(cause, "full_key", None)
    if isinstance(e, MissingConfigException) and f"'hydra/launcher/{SLURM_PLUGIN}'" in str(e):
        return UserError(missing_extra("hydra/launcher=slurm", "slurm", "hydra-submitit-launcher"), ["hydra/launcher"])
    if isinstance(e, MissingConfigException) and e.options:
        group, _, option = (e.missing_cfg_file or "").partition("/")
        if group == MODE_GROUP and ":" in option:  # an own mode's import path, where Hydra takes an option's name
            return UserError(own_mode_option(option, e.options), [group])
        return UserError(
            f"invalid choice [{group}]: {first_line(e)}; fix: use one of {', '.join(sorted(e.options))}", [group]
        )
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key in MODE_KEYS_ELSEWHERE:
        return UserError(
            f"unknown key [{key}]: the mode is set in one place, training_mode, which picks the orchestrator's part "
            f"and the trainer's loss together; fix: use training_mode={modes_with(lambda m: True)} instead",
            [key],
        )
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key:
        return UserError(f"unknown key [{key}]: {first_line(cause)}; fix: check the spelling ({LIST_KEYS})", [key])
    if key:
        return UserError(
            f"invalid value [{key}]: {first_line(cause)}; fix: give {key} a value of its type ({LIST_KEYS})", [key]
        )
    return UserError(
        f"invalid command line: {first_line(e)}; fix: write overrides as key=value (group=option for groups)"
    )


def own_mode_option(spec: str, options: list[str]) -> str:
    return (
        f"invalid choice [{MODE_GROUP}]: {spec} is an import path, and {MODE_GROUP}= on the command line picks an "
        f"option of its config group; fix: write an option for it (a {MODE_GROUP}/<name>.yaml holding "
        f"`{MODE_GROUP}: {spec}`, on hydra.searchpath: docs/modes.md, A mode of your own), or use one of "
        f"{', '.join(sorted(options))}"
    )


def not_writable(path: Path) -> str | None:
    """Why a directory could not be created at `path` (None if it can): its nearest existing ancestor
    must be a writable directory."""
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file"
    return None if os.access(existing, os.W_OK | os.X_OK) else f"{existing} is not writable"


def reused(run_dir: Path, resume: bool, key: str) -> str | None:
    """One run per run dir: an earlier run's files would be read (or overwritten) as this run's own."""
    held = [] if resume else RunDir(run_dir).earlier_run()
    if not held:
        return None
    return (
        f"run dir in use [{key}, ckpt.resume]: {run_dir} holds an earlier run ({', '.join(held)}); "
        f"fix: set ckpt.resume=true to continue it, or give this run its own {key}"
    )


def unwritable(path: Path, key: str, problem: str) -> str:
    return f"invalid output dir [{key}]: cannot create {path} ({problem}); fix: set {key} to a writable directory"


def gpus_of_a_job(master: DictConfig) -> int:
    """GPUs a job will see: what a submitit launcher asks for each job, else this machine's."""
    launcher = master.hydra.launcher
    return (launcher.gpus_per_node or 0) if "gpus_per_node" in launcher else len(visible_gpus())
