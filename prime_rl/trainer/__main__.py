"""`python -m prime_rl.trainer --config <run>/configs/trainer.yaml`"""

import argparse

from prime_rl.config import load_config
from prime_rl.config.user_error import run_or_exit
from prime_rl.trainer.train import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="role config written by the launcher")
    path = parser.parse_args().config
    run_or_exit(lambda: train(load_config(path)))


if __name__ == "__main__":
    main()
