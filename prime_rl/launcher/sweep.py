"""Before a multirun launches (or submits) anything, every point of the sweep is composed and validated.

Hydra expands `-m a=1,2 b=x,y` inside its sweeper, job by job; a typo in the last point would only surface
after the first jobs ran (or, on SLURM, after hours in the queue). So launch.py calls `check_sweep` first:
it expands the overrides with Hydra's own parser and BasicSweeper, composes each point as its job will
(Hydra's `load_sweep_config`), and validates it like `run_job` does. With `launcher.dry_run=true` and a
SLURM launcher it then prints what would be submitted instead of submitting it.
"""

import copy
import sys
from pathlib import Path
from typing import List

from hydra import initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from prime_rl.config import ConfigError, to_config, validate
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.slurm import is_slurm, print_submission

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def check_sweep(argv: List[str]) -> None:
    """With -m/--multirun: exit 2 naming the first invalid point (nothing is launched); for a SLURM dry run,
    print the submission and exit 0. Otherwise return, and Hydra runs the sweep."""
    args = get_args_parser().parse_args(argv)
    if not args.multirun:
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), job_name="launch", version_base="1.3"):
        gh = GlobalHydra.instance().hydra
        try:
            master = gh.compose_config(args.config_name or "config", args.overrides, run_mode=RunMode.MULTIRUN)
        except (HydraException, OmegaConfBaseException) as e:
            fail(f"error: {one_line(e)}")
        gpus, jobs = gpus_of_a_job(master), []
        for num, overrides in enumerate(sweep_points(master, args.overrides)):
            cfg, error = compose_and_validate(gh.config_loader, master, overrides, num, gpus)
            if error:
                fail(f"error: sweep job #{num} ({' '.join(task_overrides(overrides))}): {error}; nothing was launched")
            jobs.append((task_overrides(overrides), Path(cfg.hydra.sweep.dir) / str(cfg.hydra.sweep.subdir)))
        if master.launcher.dry_run and is_slurm(master):
            print_submission(master, jobs)
            sys.exit(0)


def sweep_points(master: DictConfig, overrides: List[str]) -> List[List[str]]:
    """The overrides of every job, in Hydra's job order (sweep params from the config first, like BasicSweeper)."""
    params = [f"{key}={value}" for key, value in (master.hydra.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides(params + overrides)
    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


def task_overrides(overrides: List[str]) -> List[str]:
    """The overrides that make this job what it is (hydra.* and hydra/… ones are the same for every job)."""
    return [o.input_line for o in OverridesParser.create().parse_overrides(overrides) if not o.is_hydra_override()]


def compose_and_validate(loader, master: DictConfig, overrides: List[str], num: int, gpus: int):
    """(the job's composed config with its hydra node, None) or (None, the one-line error)."""
    try:
        cfg = loader.load_sweep_config(master, overrides)
        with open_dict(cfg.hydra.job):
            cfg.hydra.job.num = num  # as the launcher sets it: the run dir's subdir
        task = copy.deepcopy(cfg)  # what the job's task function gets: the config without its hydra node
        with read_write(task), open_dict(task):
            del task["hydra"]
        validate(to_config(task), visible_gpus=gpus)
    except ConfigError as e:
        return None, str(e)
    except (HydraException, OmegaConfBaseException) as e:
        return None, one_line(e)
    return cfg, None


def one_line(e: Exception) -> str:
    """Hydra's and OmegaConf's errors span lines; their first line, and their cause's, say what is wrong."""
    return str(e).splitlines()[0] + (f" ({str(e.__cause__).splitlines()[0]})" if e.__cause__ else "")


def gpus_of_a_job(master: DictConfig) -> int:
    """GPUs a job will see: what a submitit launcher asks for each job, else this machine's."""
    launcher = master.hydra.launcher
    return (launcher.gpus_per_node or 0) if "gpus_per_node" in launcher else len(visible_gpus())


def fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(2)
