"""`python -m prime_rl.trainer --config <run>/configs/trainer.yaml`"""

import argparse

from prime_rl.config import load_config
from prime_rl.trainer.train import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="role config written by the launcher")
    train(load_config(parser.parse_args().config))


if __name__ == "__main__":
    main()
