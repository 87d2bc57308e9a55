"""Several evaluations as one table: the runs `--run` names (a sweep's dir stands for its jobs) times the points of a
sweep of the overrides (`-m`, expanded by Hydra's own sweeper as a launch's sweep is: `a=1,2 b=x,y` is four points,
a key given twice counts once). Every point is checked before any starts; then each is evaluated here, one after
another, or as a task of one SLURM array job (`hydra/launcher=slurm|slurm_gpu`, the launch's own presets, asking for
the eval's one server only). Each point has its own dir; their rows are joined in one results.json and one table,
each row labelled with what sets its point apart."""

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from prime_rl.config.store import composed, hydra_conf
from prime_rl.config.user_error import UserError
from prime_rl.eval.configs import run_overrides
from prime_rl.eval.results import show_results, write_results
from prime_rl.eval.run import Checked, Request, check_request, default_out, evaluate_request
from prime_rl.launcher.slurm import is_slurm
from prime_rl.launcher.validation import hydra_error, sweep_points

SWEEP_RECORD = "multirun.yaml"  # Hydra writes it into a sweep's dir; the sweep's jobs are the numbered dirs beside it
LAUNCHER = ("hydra/launcher=", "hydra.launcher.")  # overrides that say where the points run, not what they evaluate
# the eval serves one model on the student's GPUs: the resources the launcher presets ask for, without the rest (the
# typed config's deployment is stripped alike by configs.student_only)
SERVER_ONLY = [
    "deployment.num_train_gpus=0",
    "deployment.num_teacher_gpus=null",
    "deployment.num_infer_nodes=0",
    "deployment.num_train_nodes=0",
]


@dataclass(frozen=True)
class Point:
    request: Request
    label: str  # what sets it apart from the other points: the overrides it differs in, else its run's dir name


def find_points(template: Request, runs: list[Path], multirun: bool) -> tuple[list[Point], Path | None]:
    """The points `template` asks for over `runs`, and the dir of their joined results (None: a single point, which
    is evaluated as it always was)."""
    dirs = [d for run in runs for d in run_dirs(run)] or [None]
    sweeps = sweep_of(template.overrides) if multirun else [template.overrides]
    asked = [(d, o) for d in dirs for o in sweeps]
    root = (template.out or default_out(runs[0] if len(runs) == 1 else None)).resolve()
    if len(asked) == 1:
        [(run, overrides)] = asked
        return [Point(replace(template, run=run, overrides=overrides, out=root), "")], None
    labels = differences([run_overrides(d) + o for d, o in asked])
    return [
        Point(replace(template, run=d, overrides=o, out=root / str(n)), labels[n] or (d.name if d else f"#{n}"))
        for n, (d, o) in enumerate(asked)
    ], root


def run_dirs(path: Path) -> list[Path]:
    """A run dir, or a sweep's dir: its jobs' run dirs, in their order."""
    if not (path / SWEEP_RECORD).is_file():
        return [path]
    jobs = sorted((p for p in path.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    if not jobs:
        raise UserError(f"--run {path}: a sweep's dir with no job dirs (0, 1, …) yet; fix: wait for its jobs to start")
    return jobs


def sweep_of(overrides: list[str]) -> list[list[str]]:
    with hydra_conf():
        return sweep_points(GlobalHydra.instance().config_loader(), overrides)


def differences(points: list[list[str]]) -> list[str]:
    """Each point's overrides that not every point has (a key's last value counts, as in Hydra), as one line."""
    settings = [dict(o.split("=", 1) if "=" in o else (o, "") for o in point) for point in points]
    shared = set.intersection(*(set(s.items()) for s in settings))
    return [" ".join(f"{k}={v}" for k, v in s.items() if (k, v) not in shared) for s in settings]


def launcher_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(what is evaluated, where: `hydra/launcher=…` and `hydra.launcher.…`)."""
    where = [o for o in overrides if o.startswith(LAUNCHER)]
    return [o for o in overrides if o not in where], where


def check_points(points: list[Point], here: bool = True) -> list[Checked]:
    """Every point checked before any is evaluated (`here`: on this machine, else on SLURM): one line naming the first
    that fails."""
    checked = []
    for n, point in enumerate(points):
        try:
            checked.append(check_request(point.request, here))
        except UserError as e:
            if len(points) == 1:
                raise
            raise UserError(f"eval #{n} ({point.label}): {e}; nothing was evaluated", e.keys) from e
    return checked


def evaluate_point(req: Request) -> list[dict]:
    """One evaluation, recorded: its table printed, its results.json, its W&B run (what a SLURM task runs)."""
    from prime_rl.eval.wandb_results import log_results
    from prime_rl.monitor.wandb_mode import wandb_mode

    cfg, out, rows = evaluate_request(req)
    console = Console(highlight=False)
    show_results(console, rows)
    path = write_results(out, asked(req), rows)
    logged = log_results(cfg, out, asked(req), rows)
    if logged:
        console.print(f"W&B ({wandb_mode(cfg.monitor.wandb.mode)}): {logged}", soft_wrap=True)
    console.print(f"results: {path}", soft_wrap=True)
    return rows


def asked(req: Request | dict) -> dict:
    """A request as results.json and W&B record it (paths as text)."""
    return {k: plain(v) for k, v in (req if isinstance(req, dict) else asdict(req)).items()}


def plain(value):
    if isinstance(value, list):
        return [plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def evaluate_here(points: list[Point]) -> list[dict]:
    return [row for point in points for row in labelled(point, evaluate_point(point.request))]


def labelled(point: Point, rows: list[dict]) -> list[dict]:
    return [{"point": point.label, "run": str(point.request.run), **row} for row in rows] if point.label else rows


def slurm_params(point: Point, launcher: list[str], folder: Path) -> dict:
    """The sbatch parameters of the launcher preset `launcher` names for this point: resolved against its config as a
    launch's are, but with the eval's one server as the whole deployment (its GPUs, one node)."""
    req = point.request
    try:
        cfg = composed(run_overrides(req.run) + req.overrides + SERVER_ONLY + launcher, with_hydra=True)
    except (HydraException, OmegaConfBaseException) as e:  # a misspelt launcher setting
        raise hydra_error(e) from e
    if not is_slurm(cfg):
        raise UserError(
            f"{' '.join(launcher)}: an evaluation runs its points here or on SLURM; fix: hydra/launcher=slurm or "
            "slurm_gpu (with its hydra.launcher.* settings), or no hydra/launcher",
            ["hydra/launcher"],
        )
    cfg.hydra.launcher.submitit_folder = f"{folder}/%j"
    cfg.hydra.launcher.name = "prime-rl-eval"
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    params.pop("_target_")
    params.pop("max_num_timeout")  # an evaluation is not resumed: one that runs out of time is a failed point
    return params


def evaluate_on_slurm(points: list[Point], launcher: list[str], root: Path) -> tuple[list[dict], list[str]]:
    """Each point a SLURM task (one array job per distinct set of resources), waited for: the rows of those that
    finished, and a line for each that failed, naming its log."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    common = set(OmegaConf.structured(BaseQueueConf).keys())  # submitit's own names; the rest are slurm_<name>
    groups: dict[str, list[int]] = {}
    for n, point in enumerate(points):
        groups.setdefault(json.dumps(slurm_params(point, launcher, root / ".submitit"), sort_keys=True), []).append(n)
    jobs = {}
    for params, members in groups.items():
        params = json.loads(params)
        executor = submitit.AutoExecutor(folder=params.pop("submitit_folder"), cluster="slurm")
        executor.update_parameters(**{k if k in common else f"slurm_{k}": v for k, v in params.items()})
        submitted = executor.map_array(evaluate_point, [points[n].request for n in members])
        jobs.update(zip(members, submitted))
    print(f"submitted {len(points)} evaluations to SLURM: job {', '.join(j.job_id for j in jobs.values())}", flush=True)
    return wait_for(points, jobs)


def wait_for(points: list[Point], jobs: dict) -> tuple[list[dict], list[str]]:
    from submitit.core.utils import FailedJobError, UncompletedJobError

    rows, failed = [], []
    try:
        for n in sorted(jobs):
            try:
                rows += labelled(points[n], jobs[n].result())
            except (FailedJobError, UncompletedJobError):
                job = jobs[n]
                failed.append(f"eval #{n} ({points[n].label}) failed as SLURM job {job.job_id}: see {job.paths.stderr}")
    except KeyboardInterrupt:  # the jobs are this command's: they do not outlive it
        for job in jobs.values():
            job.cancel(check=False)
        raise
    return rows, failed
