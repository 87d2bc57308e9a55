"""Hydra's sweeper for `python launch.py -m`: every point composed and validated before the launcher gets one.

Hydra loads sweepers only from the `hydra_plugins` namespace package, hence this module; the work is done in
prime_rl/launcher/validation.py. Picked by `hydra/sweeper: validating` (conf/hydra/sweeper/validating.yaml).
"""

from pathlib import Path

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

from prime_rl.launcher.slurm import is_slurm, print_submission
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
        if self.config.launcher.dry_run and is_slurm(self.config):
            print_submission(self.config, jobs)
            return []
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        results = self.launcher.launch(points, initial_job_idx=0)
        for result in results:
            _ = result.return_value  # re-raises a job's exception, as Hydra's own sweeper does
        return [results]
