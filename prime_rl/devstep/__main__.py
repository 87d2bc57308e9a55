"""`python -m prime_rl.devstep <hydra overrides...> [--json PATH] [--run-dir DIR] [--show N]`: one orchestrator step
and one trainer step of the run those overrides compose (as for launch.py), in this process, around the student's
vLLM server (the step itself: devstep/step.py)."""

import argparse
from pathlib import Path

from prime_rl.devstep.config import validated
from prime_rl.launcher.server_handle import run_stoppable


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m prime_rl.devstep", description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for launch.py (key=value, group=option)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write what each stage made to this JSON file")
    p.add_argument(
        "--run-dir", type=Path, metavar="DIR", help="the run dir (default: a temporary one, removed after a success)"
    )
    p.add_argument(
        "--show", type=int, default=16, metavar="N", help="samples printed (default 16; --json has every one)"
    )
    return p.parse_intermixed_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_stoppable(lambda: devstep(args))


def devstep(args: argparse.Namespace) -> None:
    cfg = validated(args.overrides)  # a mistake: exit 2 with one line, before anything starts
    from prime_rl.devstep.step import one_step  # torch, transformers: seconds to import, once the run is valid

    one_step(cfg, args.json, args.run_dir, args.show)


if __name__ == "__main__":
    main()
