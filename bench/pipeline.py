"""Pipeline efficiency at orchestrator.max_async_level 0, 1, 2:  Σ_steps max(time/generate, time/train) / wall_s.

1.0 means every step took only as long as its slower half, i.e. generation and training fully overlapped (or one
of them is free); with no overlap at all it is max/(generate + train + the rest). wall_s is the trainer's own
step clock (Σ time/step: from the end of one step to the end of the next, so it holds the wait for the batch,
weight export and everything else between steps). The first `--skip` steps are left out: step 0 also waits for
the orchestrator's start-up. Evaluation and intermediate checkpoints are off, since neither is in time/generate
or time/train and both would only dilute the number.

    .venv/bin/python bench/pipeline.py --runs 3          # full: ~15 min on the 2-core machine
    .venv/bin/python bench/pipeline.py --runs 1 --steps 3 --smoke
"""

import argparse
from pathlib import Path

from common import add_runs_arg, bench_dir, finish, median, print_table, run_launcher

NAME = "pipeline"


def overrides(args, level: int) -> list[str]:
    return [
        f"max_steps={args.steps}",
        f"orchestrator.max_async_level={level}",
        "orchestrator.eval.interval=0",
        "ckpt.interval=0",
        "monitor=off",
    ]


def efficiency(rows: list[dict], skip: int) -> dict:
    steps = [r for r in rows if r["step"] >= skip]
    if not steps:
        return {"ok": False}
    mean = lambda key: sum(r.get(key, 0.0) for r in steps) / len(steps)  # noqa: E731
    busy = sum(max(r["time/generate"], r["time/train"]) for r in steps)
    wall = sum(r["time/step"] for r in steps)
    return {
        "ok": True,
        "steps": len(steps),
        "efficiency": busy / wall,
        "wall_s": wall,
        "step_s": wall / len(steps),
        "generate_s": mean("time/generate"),
        "train_s": mean("time/train"),
        "reload_s": mean("time/reload"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    parser.add_argument("--levels", default="0,1,2", help="orchestrator.max_async_level values")
    parser.add_argument("--skip", type=int, default=1, help="leading steps left out (start-up)")
    args = parser.parse_args()
    levels = [int(v) for v in args.levels.split(",")]
    out = bench_dir(NAME)
    per_run: dict[int, list[dict]] = {level: [] for level in levels}
    for run in range(args.runs):
        for level in levels:  # levels interleaved: a change in machine load hits all of them
            print(f"run {run + 1}/{args.runs}, max_async_level={level}", flush=True)
            launch = run_launcher(overrides(args, level), out / f"async{level}-{run}")
            result = efficiency([r for _, r in launch.train_rows()], args.skip) if launch.ok else {"ok": False}
            per_run[level].append(result)
    report(args, levels, per_run, out)


def report(args, levels: list[int], per_run: dict[int, list[dict]], out: Path) -> None:
    keys = ["efficiency", "step_s", "generate_s", "train_s", "reload_s"]
    med = {level: {k: median(r.get(k) for r in per_run[level]) for k in keys} for level in levels}
    print_table(
        f"pipeline efficiency: medians of {args.runs} run(s), steps {args.skip}..{args.steps - 1}",
        ["max_async_level", "Σmax(gen,train)/wall", "s/step", "generate s", "train s", "reload s"],
        [[str(level)] + [med[level][k] for k in keys] for level in levels],
    )
    finish(
        NAME,
        {
            "runs": args.runs,
            "steps": args.steps,
            "skip": args.skip,
            "median": med,
            "per_run": per_run,
            "run_dir": str(out),
        },
        args.smoke,
    )


if __name__ == "__main__":
    main()
