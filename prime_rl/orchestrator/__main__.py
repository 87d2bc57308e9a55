"""`python -m prime_rl.orchestrator --config <run>/configs/orchestrator.yaml`"""

import argparse
import asyncio
import sys

from prime_rl.config import load_config
from prime_rl.orchestrator.loop import run
from prime_rl.teacher.client import TeacherError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="role config written by the launcher")
    try:
        asyncio.run(run(load_config(parser.parse_args().config)))
    except TeacherError as e:  # a misfit teacher is a user error: one line, no traceback
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
