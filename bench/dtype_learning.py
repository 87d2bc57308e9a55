"""Does bf16 learn as float32 does? Issue 48's "equal learning" check for what `dtype=auto` picks: at a size of the
model-size curve (bench/model_size.py's run: 8 prompts x 4, completions of 48-64 tokens, eval on 32 prompts at
step 0, midway and the last step), the same seeds in float32 and in bfloat16 (server and trainer alike), per
layout. Per dtype: the eval reward at the last step as a mean over seeds with its standard error (the seeds'
spread), the drop from step 0, and steps/min; then bf16 minus float32 in standard errors of the difference.

    .venv/bin/python bench/dtype_learning.py --sizes m --runs 5          # ~25 min on 2 cores
    .venv/bin/python bench/dtype_learning.py --sizes s --runs 1 --steps 2 --smoke
"""

import argparse
import math
import statistics
from pathlib import Path

from common import add_runs_arg, bench_dir, compose, finish, print_table, run_launcher, run_outcome
from model_size import SIZES, short_run
from vs_trl import LAYOUTS, add_layouts_arg

NAME = "dtype_learning"
DTYPES = ("float32", "bfloat16")


def run_one(size: str, steps: int, seed: int, layout: str, dtype: str, out: Path, timeout_s: float) -> dict:
    overrides = [
        *short_run(SIZES[size], steps, seed),
        LAYOUTS[layout],
        f"trainer.dtype={dtype}",
        f"inference.dtype={dtype}",
    ]
    launch = run_launcher(overrides, out / f"{size}-{layout}-{dtype}-{seed}", timeout_s=timeout_s)
    return {**run_outcome(launch), "eval_steps": [r["step"] for _, r in launch.eval_rows()]}


def mean_se(values: list[float]) -> tuple[float, float]:
    from prime_rl.orchestrator.evaluation import standard_error

    return statistics.fmean(values), standard_error(values)


def summarize(runs: list[dict]) -> dict:
    """Over the seeds of one dtype: the last eval, its change from step 0, steps/min."""
    done = [r for r in runs if r["ok"] and r["eval_last"] is not None]
    last = [r["eval_last"] for r in done]
    change = [r["eval_last"] - r["eval_first"] for r in done]
    last_mean, last_se = mean_se(last) if last else (None, None)
    change_mean, change_se = mean_se(change) if change else (None, None)
    return {
        "eval_last": last_mean,
        "eval_last_se": last_se,
        "eval_change": change_mean,
        "eval_change_se": change_se,
        "steps_per_min": statistics.median(r["steps_per_min"] for r in runs if r["steps_per_min"]),
        "ok": sum(r["ok"] for r in runs),
    }


def in_se(bf16: dict, fp32: dict) -> float | None:
    """bf16's last eval minus float32's, in standard errors of the difference."""
    if bf16["eval_last"] is None or fp32["eval_last"] is None:
        return None
    se = math.hypot(bf16["eval_last_se"], fp32["eval_last_se"])
    return (bf16["eval_last"] - fp32["eval_last"]) / se if se else None  # one seed: no spread to measure in


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser, default=5)
    add_layouts_arg(parser)
    parser.add_argument("--sizes", default="m", help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--steps", type=int, default=0, help="steps per run (0: the size's own in model_size.py)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per run")
    args = parser.parse_args()
    from prime_rl.prepare import prepare_student

    out, record, rows = bench_dir(NAME), {"runs": args.runs, "layouts": args.layouts, "sizes": {}}, []
    for size in args.sizes.split(","):
        steps = args.steps or SIZES[size].steps
        prepare_student(compose(short_run(SIZES[size], steps, 0)))  # built before any clock starts
        per_run = {(layout, dtype): [] for layout in args.layouts for dtype in DTYPES}
        for seed in range(args.runs):  # seed by seed, the variants alternating: drift hits them alike
            for layout, dtype in per_run:
                print(f"size {size}, seed {seed}, {layout}, {dtype}", flush=True)
                per_run[layout, dtype].append(run_one(size, steps, seed, layout, dtype, out, args.timeout))
        summary = {f"{layout}/{dtype}": summarize(runs) for (layout, dtype), runs in per_run.items()}
        for layout in args.layouts:
            fp32, bf16 = summary[f"{layout}/float32"], summary[f"{layout}/bfloat16"]
            bf16["vs_float32_se"] = in_se(bf16, fp32)
            rows += [
                [size, layout, dtype, s["eval_last"], s["eval_last_se"], s["eval_change"], s["eval_change_se"]]
                + [s["steps_per_min"], s.get("vs_float32_se"), f"{s['ok']}/{args.runs}"]
                for dtype, s in (("float32", fp32), ("bfloat16", bf16))
            ]
        record["sizes"][size] = {
            "steps": steps,
            "summary": summary,
            "per_run": {"/".join(k): v for k, v in per_run.items()},
        }
    print_table(
        f"bf16 against float32: means over {args.runs} seed(s) ± their standard error",
        ["size", "layout", "dtype", "eval last", "± se", "change", "± se", "steps/min", "bf16-fp32 (se)", "ok"],
        rows,
    )
    finish(NAME, record, args.smoke)


if __name__ == "__main__":
    main()
