"""Hydra's sweeper for `python launch.py -m`: every point composed and validated before the launcher gets one.

Hydra loads sweepers only from the `hydra_plugins` namespace package, hence this module; the work is done in
prime_rl/launcher/validation.py. Picked by `hydra/sweeper: validating` (conf/hydra/sweeper/validating.yaml).
"""

import re
from pathlib import Path

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

from prime_rl.config.user_error import exit_with
from prime_rl.launcher.slurm import asked, cluster_refusal, is_slurm, jobs_watched, print_submission, unfinished_job
from prime_rl.launcher.validation import check_sweep, sweep_points


class ValidatingSweeper(Sweeper):
    def __init__(self, params: dict | None = None):
        self.params = params or {}  # hydra.sweeper.params: sweep values kept in the config instead of the command line
        self.config = self.hydra_context = self.launcher = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> list:
        loader = self.hydra_context.config_loader
        points = sweep_points(loader, [f"{key}={value}" for key, value in self.params.items()] + arguments)
        jobs = check_sweep(loader, self.config, points)  # exits 2 at the first bad point, before any job
        slurm = is_slurm(self.config)
        if self.config.launcher.dry_run and slurm:
            print_submission(self.config, jobs)
            return []
        refusal = cluster_refusal(self.config) if slurm else None
        if refusal:
            exit_with(
                f"SLURM cannot run these jobs ({asked(self.config)}): {refusal}; nothing was submitted; fix: ask for "
                "what a partition has (`sinfo -o '%P %D %c %m %G'` lists them; hydra.launcher.partition picks one)"
            )
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        results = self.launch(points, [run_dir for _, run_dir in jobs]) if slurm else self.launcher.launch(points, 0)
        for result in results:
            _ = result.return_value  # re-raises a job's exception, as Hydra's own sweeper does
        return [results]

    def launch(self, points: list[list[str]], run_dirs: list[Path]) -> list:
        """The SLURM jobs, waited for with their pending reasons shown; a job that ends without a result (cancelled,
        or its first node killed before it could write one) ends the sweep with one line, and what its run recorded."""
        from submitit.core.utils import FailedJobError, UncompletedJobError

        try:
            with jobs_watched():
                return self.launcher.launch(points, initial_job_idx=0)
        except FailedJobError as e:  # its run failed and said why (launcher/job.py JobFailed); else its traceback
            said = re.search(r"JobFailed: error: (.*)", str(e))
            if not said:
                raise
            exit_with(f"{said.group(1)}; the sweep's other jobs go on (squeue)")
        except UncompletedJobError as e:
            exit_with(f"{unfinished_job(e, run_dirs)}; the sweep's other jobs go on (squeue)")
