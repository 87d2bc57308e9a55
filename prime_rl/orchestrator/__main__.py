"""`python -m prime_rl.orchestrator --config <run>/configs/orchestrator.yaml`"""

import argparse
import asyncio

from prime_rl.config import load_config
from prime_rl.config.user_error import run_or_exit
from prime_rl.orchestrator.loop import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="role config written by the launcher")
    path = parser.parse_args().config
    run_or_exit(lambda: asyncio.run(run(load_config(path))))


if __name__ == "__main__":
    main()
