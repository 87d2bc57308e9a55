"""Entry point: compose the Hydra config, validate it, then plan and run the processes of one job."""

import hydra
from omegaconf import DictConfig

from prime_rl.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from prime_rl.launcher.job import run_job

    run_job(cfg)


if __name__ == "__main__":
    main()
