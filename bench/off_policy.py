"""The off-policy correction's presets (issue 48, docs/off_policy.md) where the mismatch between sampler and trainer
is real: the default run at max_async_level=2 (float32: the mismatch is staleness), and the 4.1 M size (s) and the
13 M size (m) of bench/model_size.py with server and trainer in bf16 (max_async_level=1: rounding and staleness).
Per preset,
medians over seeds: the eval reward at the last step (its standard error beside it) and at a fixed wall-clock (the
last evaluation every preset's run had reached by then), steps/min, and what the correction did (the median
mismatch_kl, the run's largest token weight, the mean shares of tokens dropped and truncated, the steps where it
dropped or truncated any).

    .venv/bin/python bench/off_policy.py --runs 3                        # both points: ~80 min on 2 cores
    .venv/bin/python bench/off_policy.py --runs 1 --points async2        # ~12 min
    .venv/bin/python bench/off_policy.py --runs 1 --points bf16_size_m   # ~30 min a seed (--first-seed N)
    .venv/bin/python bench/off_policy.py --runs 1 --steps 4 --smoke --presets band,token_tis
"""

import argparse
from pathlib import Path

from common import (
    add_runs_arg,
    bench_dir,
    compare_variants,
    compose,
    finish,
    median,
    print_table,
    run_launcher,
    run_outcome,
    steady_rows,
)
from model_size import SIZES, short_run

NAME = "off_policy"
PRESETS = ["band", "none", "token_tis", "seq_tis", "icepop", "seq_mask_tis"]
BF16 = ["inference.dtype=bfloat16", "trainer.dtype=bfloat16"]
SHARES = {  # per step, the share of tokens -> the result's key (its mean over the run's steps)
    "masked_fraction": "masked",
    "correction/truncated_token": "truncated_token",
    "correction/truncated_sequence": "truncated_sequence",
}
PER_RUN = ["mismatch_kl", "weight_max", *SHARES.values(), "steps_acted", "skipped"]
# the bf16 points: the size of bench/model_size.py each runs (records before 2026-12-05 call bf16_4m bf16_13m)
BF16_SIZES = {"bf16_4m": "s", "bf16_size_m": "m"}


def point_overrides(point: str, steps: int, seed: int) -> list[str]:
    """The run of a point, without its preset: evaluations every quarter of the run, for the fixed wall-clock."""
    common = ["monitor=off", f"seed={seed}", f"max_steps={steps}", f"orchestrator.eval.interval={max(1, steps // 4)}"]
    if point == "async2":
        return [*common, "orchestrator.max_async_level=2"]
    return [*short_run(SIZES[BF16_SIZES[point]], steps, seed), *BF16, *common, "orchestrator.max_async_level=1"]


def run_preset(args, point: str, preset: str, seed: int, out: Path) -> dict:
    launch = run_launcher(
        [*point_overrides(point, args.steps, seed), f"correction={preset}"],
        out / f"{point}-{preset}-{seed}",
        timeout_s=args.timeout,
    )
    rows = steady_rows(launch)
    acted = [any(r.get(metric, 0) > 0 for metric in SHARES) for r in rows]
    return {
        **run_outcome(launch),
        "evals": [(t, r["eval/reward"]) for t, r in launch.eval_rows()],  # for the fixed wall-clock
        "mismatch_kl": median(r.get("mismatch_kl") for r in rows),
        "weight_max": max((r["correction/token_weight_max"] for r in rows), default=None),  # over the whole run
        **{key: sum(r.get(metric, 0) for r in rows) / max(len(rows), 1) for metric, key in SHARES.items()},
        "steps_acted": sum(acted),  # steps where the correction dropped or truncated a token
        "skipped": sum(r.get("optim/skipped", 0) for r in rows),
    }


def eval_at(evals: list[tuple[float, float]], wall_s: float) -> float | None:
    """The eval reward of the last evaluation logged by `wall_s` seconds into the run."""
    before = [reward for t, reward in evals if t <= wall_s]
    return before[-1] if before else None


def with_fixed_wall(runs: list[dict]) -> float:
    """Each run's eval at the wall-clock every run had reached its last evaluation by; returns that time."""
    wall_s = min(run["evals"][-1][0] for run in runs if run["evals"])
    for run in runs:
        run["eval_at_wall"] = eval_at(run["evals"], wall_s)
    return wall_s


KEYS = ["eval_last", "eval_last_stderr", "eval_at_wall", "steps_per_min", *PER_RUN]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps per run")
    points = ", ".join(["async2", *BF16_SIZES])
    parser.add_argument("--points", default="async2,bf16_4m", help=f"comma-separated, of {points}")
    parser.add_argument("--presets", default=",".join(PRESETS), help="comma-separated, of " + ", ".join(PRESETS))
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per run")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + runs - 1")
    args = parser.parse_args()
    from prime_rl.prepare import prepare_student

    out, presets = bench_dir(NAME), args.presets.split(",")
    record = {"runs": args.runs, "first_seed": args.first_seed, "steps": args.steps}
    for point in args.points.split(","):
        prepare_student(compose(point_overrides(point, args.steps, 0)))  # built before any clock starts
        run_one = lambda p, seed, point=point: run_preset(args, point, p, args.first_seed + seed, out)  # noqa: E731
        runs, _ = compare_variants(args.runs, presets, run_one)
        wall_s = with_fixed_wall([record for seed in runs for record in seed.values()])
        summary = {p: {k: median(seed[p][k] for seed in runs) for k in KEYS} for p in presets}
        print_table(
            f"off-policy correction at {point}, {args.steps} steps: medians of {args.runs} run(s); "
            f"eval at {wall_s:.0f} s",
            ["preset", "eval last", "± stderr", "eval @ wall", "steps/min", "mismatch_kl", "weight max", "masked"]
            + ["trunc tok", "trunc seq", "steps acted", "skipped"],
            [[p, *(summary[p][k] for k in KEYS)] for p in presets],
        )
        record[point] = {"wall_s": wall_s, "presets": summary, "per_run": runs}
    finish(NAME, record, args.smoke)


if __name__ == "__main__":
    main()
