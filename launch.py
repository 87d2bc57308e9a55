"""Entry point: Hydra composes the config; it is validated once (launcher/validation.py) before anything is
written, started or submitted; then each job (or each sweep point) runs the local launcher (launcher/job.py)."""

import os

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from prime_rl.config import register_configs
from prime_rl.config.user_error import exit_with
from prime_rl.launcher.validation import hydra_error

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from prime_rl.launcher.job import run_job

    run_job(cfg)


if __name__ == "__main__":
    # Hydra then raises an error in the command line instead of printing it over several lines: one line here.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        main()
    except (HydraException, OmegaConfBaseException) as e:
        exit_with(str(hydra_error(e)))
