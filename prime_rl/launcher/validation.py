"""Before Hydra runs anything, the command line is composed and validated: a bad input exits 2 with one line.

Hydra would report a typo in a key with a traceback-like message (exit 1) and a broken cross-field rule
only once the job runs; a sweep expands `-m a=1,2 b=x,y` inside its sweeper, job by job, so a typo in the
last point would surface after the first jobs ran (or, on SLURM, after hours in the queue). So launch.py
calls `preflight` first: it composes the run (or every sweep point, with Hydra's own parser, BasicSweeper
and `load_sweep_config`) exactly as the job will, validates it like `run_job` does, and checks that the
output dir can be written. With `launcher.dry_run=true` and a SLURM launcher it then prints what would be
submitted instead of submitting it.
"""

import os
import sys
from pathlib import Path

from hydra import initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from prime_rl.config import ConfigError, to_config, validate
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.slurm import is_slurm, print_submission

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
LIST_KEYS = "`python launch.py --cfg job` prints every key with its value"


def preflight(argv: list[str]) -> None:
    """Exit 2 with one line if the run (or any sweep point) is invalid; for a SLURM dry run, print the
    submission and exit 0. Otherwise return, and Hydra runs the job or the sweep."""
    args = get_args_parser().parse_args(argv)
    if args.help or args.hydra_help or args.cfg or args.info or args.shell_completion:
        return  # Hydra's own inspection commands: show the config as it is, valid or not
    with initialize_config_dir(config_dir=str(CONF_DIR), job_name="launch", version_base="1.3"):
        gh = GlobalHydra.instance().hydra
        mode = RunMode.MULTIRUN if args.multirun else RunMode.RUN
        try:
            master = gh.compose_config(args.config_name or "config", args.overrides, run_mode=mode)
        except (HydraException, OmegaConfBaseException) as e:
            fail(hydra_error(e))
        if args.multirun:
            check_sweep(gh.config_loader, master, args.overrides)
        else:
            check_run(master)


def check_run(cfg: DictConfig) -> None:
    error = validation_error(cfg, len(visible_gpus()))
    if error:
        fail(error)
    run_dir = Path(cfg.hydra.run.dir)
    problem = not_writable(run_dir)
    if problem:  # Hydra would fail creating it with a traceback
        fail(unwritable(run_dir, "hydra.run.dir", problem))


def check_sweep(loader, master: DictConfig, overrides: list[str]) -> None:
    gpus, jobs = gpus_of_a_job(master), []
    for num, point in enumerate(sweep_points(master, overrides)):
        cfg, error = compose_point(loader, master, point, num, gpus)
        if error:
            fail(f"sweep job #{num} ({' '.join(task_overrides(point))}): {error}; nothing was launched")
        jobs.append((task_overrides(point), Path(cfg.hydra.sweep.dir) / str(cfg.hydra.sweep.subdir)))
    sweep_dir = Path(master.hydra.sweep.dir)
    problem = not_writable(sweep_dir)
    if problem:
        fail(unwritable(sweep_dir, "hydra.sweep.dir", problem))
    if master.launcher.dry_run and is_slurm(master):
        print_submission(master, jobs)
        sys.exit(0)


def sweep_points(master: DictConfig, overrides: list[str]) -> list[list[str]]:
    """The overrides of every job, in Hydra's job order (sweep params from the config first, like BasicSweeper)."""
    params = [f"{key}={value}" for key, value in (master.hydra.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides(params + overrides)
    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


def task_overrides(overrides: list[str]) -> list[str]:
    """The overrides that make this job what it is (hydra.* and hydra/… ones are the same for every job)."""
    return [o.input_line for o in OverridesParser.create().parse_overrides(overrides) if not o.is_hydra_override()]


def compose_point(loader, master: DictConfig, overrides: list[str], num: int, gpus: int):
    """(the job's composed config with its hydra node, None) or (None, the one-line error)."""
    try:
        cfg = loader.load_sweep_config(master, overrides)
    except (HydraException, OmegaConfBaseException) as e:
        return None, hydra_error(e)
    with open_dict(cfg.hydra.job):
        cfg.hydra.job.num = num  # as the launcher sets it: the run dir's subdir
    return cfg, validation_error(cfg, gpus)


def validation_error(cfg: DictConfig, gpus: int) -> str | None:
    """The one-line error of the job's config (without its hydra node, as the task function gets it)."""
    task = OmegaConf.to_container(cfg)  # a plain copy: far cheaper than deep-copying the DictConfig
    del task["hydra"]
    try:
        validate(to_config(task), visible_gpus=gpus)
    except ConfigError as e:
        return str(e)
    except OmegaConfBaseException as e:
        return hydra_error(e)
    return None


def hydra_error(e: Exception) -> str:
    """One line from Hydra's and OmegaConf's multi-line errors, with the key and a fix."""
    cause = e.__cause__ or e
    key = getattr(cause, "full_key", None)
    if isinstance(e, MissingConfigException) and e.options:
        group = (e.missing_cfg_file or "").split("/")[0]
        return f"invalid choice [{group}]: {first_line(e)}; fix: use one of {', '.join(sorted(e.options))}"
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and key:
        return f"unknown key [{key}]: {first_line(cause)}; fix: check the spelling ({LIST_KEYS})"
    if key:
        return f"invalid value [{key}]: {first_line(cause)}; fix: give {key} a value of its type ({LIST_KEYS})"
    return f"invalid command line: {first_line(e)}; fix: write overrides as key=value (group=option for groups)"


def first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0]


def not_writable(path: Path) -> str | None:
    """Why a directory could not be created at `path` (None if it can): its nearest existing ancestor
    must be a writable directory."""
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file"
    return None if os.access(existing, os.W_OK | os.X_OK) else f"{existing} is not writable"


def unwritable(path: Path, key: str, problem: str) -> str:
    return f"invalid output dir [{key}]: cannot create {path} ({problem}); fix: set {key} to a writable directory"


def gpus_of_a_job(master: DictConfig) -> int:
    """GPUs a job will see: what a submitit launcher asks for each job, else this machine's."""
    launcher = master.hydra.launcher
    return (launcher.gpus_per_node or 0) if "gpus_per_node" in launcher else len(visible_gpus())


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)
