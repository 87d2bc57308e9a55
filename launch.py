"""Entry point: compose the Hydra config, validate it, then plan and run the processes of one job."""

import sys

import hydra
from omegaconf import DictConfig

from prime_rl.config import register_configs
from prime_rl.launcher.preflight import preflight
from prime_rl.launcher.slurm import register_resolvers

register_configs()
register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from prime_rl.launcher.job import run_job

    run_job(cfg)


if __name__ == "__main__":
    preflight(sys.argv[1:])  # the run, or every sweep point, composed and validated before anything starts
    main()
