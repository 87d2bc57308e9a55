"""`python -m prime_rl.eval [-m] [--run DIR,…] [--step S,…] [--task T,…] [--dry-run] <hydra overrides...>`: the
models of a run (its starting model, a step, the latest, a LoRA run's merged model, its local teacher) or the config's
model (model.name: a model dir or a Hub id) evaluated on one or more tasks, with the training eval's sampling and
metrics (orchestrator.eval.*: k samples per prompt for avg@k and pass@k), around a vLLM server it starts and stops (or
a standing one, inference.url). Several runs (a sweep's dir: its jobs) and `-m` sweeps of the overrides are several
evaluations, here or on SLURM (hydra/launcher=slurm), joined in one table. `--dry-run` checks them and prints what
each would do."""

import argparse
import sys
from pathlib import Path

from prime_rl.launcher.server_handle import run_stoppable


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m prime_rl.eval", description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for launch.py, on top of the run's own")
    p.add_argument(
        "--run", type=paths, default=[], metavar="DIR,…", help="run dirs of launch.py (a sweep's dir: its jobs)"
    )
    p.add_argument(
        "-m", "--multirun", action="store_true", help="sweep the overrides as launch.py -m does: an evaluation each"
    )
    p.add_argument(
        "--step", type=names, default=[], metavar="S,…", help="with --run: start, latest (default), merged, N; a list"
    )
    p.add_argument(
        "--task", type=names, default=[], metavar="T,…", help="task group options (default: the run's own task)"
    )
    p.add_argument("--teacher", action="store_true", help="evaluate the run's (local_vllm) teacher instead")
    p.add_argument("--harness", type=names, default=[], metavar="T,…", help="lm-eval tasks too (the harness extra)")
    p.add_argument("--harness-include", type=Path, metavar="DIR", help="a dir of your own lm-eval task YAMLs")
    p.add_argument(
        "--harness-api",
        choices=["chat", "completions"],
        default="chat",
        help="chat: the server applies the chat template (tasks that generate); completions: raw text, loglikelihood",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check every point and print what each would evaluate, from where, and where it would run; start nothing",
    )
    p.add_argument(
        "--out", type=Path, metavar="DIR", help="its dir: results.json, the server's log (default: <run>/evals/<time>)"
    )
    return p.parse_intermixed_args(argv)


def names(text: str) -> list[str]:
    """A comma-separated list, as a Hydra sweep writes one: start,latest."""
    return [name.strip() for name in text.split(",") if name.strip()]


def paths(text: str) -> list[Path]:
    return [Path(name) for name in names(text)]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_stoppable(lambda: evaluate(args))


def evaluate(args: argparse.Namespace) -> None:
    from rich.console import Console

    from prime_rl.eval.points import (
        asked,
        check_points,
        evaluate_here,
        evaluate_on_slurm,
        find_points,
        launcher_overrides,
    )
    from prime_rl.eval.results import show_results, write_results
    from prime_rl.eval.run import Request

    overrides, launcher = launcher_overrides(args.overrides)
    harness = (args.harness, args.harness_include, args.harness_api)
    template = Request(None, args.step, args.task, overrides, args.out, args.teacher, *harness)
    points, root = find_points(template, args.run, args.multirun)
    checked = check_points(points, here=not launcher)
    if args.dry_run:
        from prime_rl.eval.dry_run import show_points

        show_points(points, checked, launcher, root)
        return
    if launcher:
        rows, failed = evaluate_on_slurm(points, launcher, root or points[0].request.out)
    else:
        rows, failed = evaluate_here(points), []
    if root is not None or launcher:  # one table across the points (a SLURM job printed its own in its log)
        console = Console(highlight=False)
        show_results(console, rows)
        if root is not None:
            console.print(f"results: {write_results(root, asked(vars(args)), rows)}", soft_wrap=True)
    for line in failed:
        print(line, file=sys.stderr, flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
