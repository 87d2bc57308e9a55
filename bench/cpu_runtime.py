"""vLLM's CPU guide, measured: the allocator and OpenMP preloads it asks for (tcmalloc, Intel OpenMP) and bf16
for the server and the trainer, against the plain float32 run, in the colocated layout (the CPU default).

Variants (each a set of environment variables and overrides on the same run):
- plain: float32 (pinned: `dtype=auto` is bf16 on a CPU with native bf16 at 4 M parameters and up), no preload
- tcmalloc: LD_PRELOAD of the system's libtcmalloc_minimal (`apt-get install libtcmalloc-minimal4`)
- tcmalloc+iomp: tcmalloc and Intel OpenMP's libiomp5 (`pip install intel-openmp`) for every process
- iomp-blocktime0: the same with KMP_BLOCKTIME=0 (no spinning after a parallel region)
- bf16: `inference.dtype=bfloat16 trainer.dtype=bfloat16`, no preload

Points: the default run (0.38 M, 16 × 8, ≤ 16 tokens, on-policy so `mismatch_kl` is the dtype's own) and the
13 M size of bench/model_size.py (8 × 4, completions of 48-64 tokens), where arithmetic, not per-request cost,
sets the step. Per variant: steps/min between the first and last step, the medians of where a step's time goes,
eval reward at the end and `mismatch_kl` (median and max over the train rows).

    .venv/bin/python bench/cpu_runtime.py --runs 3            # ~45 min on the 2-core machine
    .venv/bin/python bench/cpu_runtime.py --runs 1 --points default --smoke
"""

import argparse
import sys
from pathlib import Path

from common import STEP_TIMES, add_runs_arg, bench_dir, compose, finish, median, print_table, run_launcher, step_times
from model_size import SIZES, Size, short_run

NAME = "cpu_runtime"
TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
IOMP = Path(sys.prefix) / "lib" / "libiomp5.so"  # where `pip install intel-openmp` puts it
BF16 = ["inference.dtype=bfloat16", "trainer.dtype=bfloat16"]
FP32 = ["inference.dtype=float32", "trainer.dtype=float32"]  # pinned: dtype=auto is bf16 on some CPUs and sizes
# the sizes of bench/model_size.py, and one between its two smallest, where bf16 starts or stops paying (~1.7 M)
POINTS = {**SIZES, "xs2": Size(192, 3, 4, 768, 20)}


def variants() -> dict[str, tuple[dict[str, str], list[str]]]:
    """name -> (environment, overrides)."""
    return {
        "plain": ({}, FP32),
        "tcmalloc": ({"LD_PRELOAD": str(TCMALLOC)}, FP32),
        "tcmalloc+iomp": ({"LD_PRELOAD": f"{TCMALLOC}:{IOMP}"}, FP32),
        # Intel OpenMP's threads spin 200 ms after each parallel region by default: in turns, into the other phase
        "iomp-blocktime0": ({"LD_PRELOAD": f"{TCMALLOC}:{IOMP}", "KMP_BLOCKTIME": "0"}, FP32),
        "bf16": ({}, BF16),
    }


def point_overrides(point: str, seed: int) -> list[str]:
    common = ["deployment.layout=colocated", "orchestrator.max_async_level=0", "monitor=off", f"seed={seed}"]
    if point == "default":
        return [*common, "max_steps=80", "orchestrator.eval.interval=80"]
    return [*short_run(POINTS[point], 12, seed), *common[:2]]


def run_variant(point: str, variant: str, seed: int, out: Path, timeout: float) -> dict:
    env, extra = variants()[variant]
    launch = run_launcher([*point_overrides(point, seed), *extra], out, timeout_s=timeout, env=env)
    train = [r for _, r in launch.train_rows()]
    stamps = [t for t, _ in launch.train_rows()]
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else None
    evals = [r["eval/reward"] for _, r in launch.eval_rows()]
    return {
        "ok": launch.ok,
        "wall_s": launch.process.duration_s,
        "steps_per_min": 60 * (len(stamps) - 1) / span if span else None,
        "eval_final": evals[-1] if evals else None,
        "mismatch_kl_median": median(r.get("mismatch_kl") for r in train),
        "mismatch_kl_max": max((r["mismatch_kl"] for r in train if "mismatch_kl" in r), default=None),
        "step_times": step_times([r for r in train if r["step"] >= 1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument(
        "--points", default="default,m", help="comma-separated: default and/or a size (" + ", ".join(POINTS) + ")"
    )
    parser.add_argument("--variants", default=",".join(variants()), help="comma-separated, of " + ", ".join(variants()))
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per run")
    args = parser.parse_args()
    missing = [str(p) for p in (TCMALLOC, IOMP) if not p.exists()]
    if missing:
        install = "apt-get install libtcmalloc-minimal4; pip install intel-openmp"
        raise SystemExit(f"missing {', '.join(missing)}: {install}")
    from prime_rl.prepare import prepare_student

    out = bench_dir(NAME)
    names = args.variants.split(",")
    results = {}
    for point in args.points.split(","):
        prepare_student(compose(point_overrides(point, 0)))  # built before any clock starts
        runs = []
        for seed in range(args.runs):
            print(f"{point}, run {seed + 1}/{args.runs}", flush=True)
            runs.append({v: run_variant(point, v, seed, out / f"{point}-{v}-{seed}", args.timeout) for v in names})
        results[point] = runs
    report(args, names, results, out)


KEYS = ["steps_per_min", "eval_final", "mismatch_kl_median", "mismatch_kl_max"]


def report(args, names: list[str], results: dict, out: Path) -> None:
    rows, summary = [], {}
    for point, runs in results.items():
        plain = median(r["plain"]["steps_per_min"] for r in runs) if "plain" in names else None
        summary[point] = {}
        for v in names:
            med = {k: median(r[v][k] for r in runs) for k in KEYS}
            times = {k: median(r[v]["step_times"][k] for r in runs) for k in STEP_TIMES}
            speedup = med["steps_per_min"] / plain if plain and med["steps_per_min"] else None
            summary[point][v] = {**med, "vs_plain": speedup, "step_times": times}
            rows.append([point, v, *med.values(), speedup, *times.values()])
    print_table(
        f"CPU runtime variants, colocated, on-policy: medians of {args.runs} run(s)",
        ["point", "variant", "steps/min", "eval last", "mkl median", "mkl max", "vs plain", *STEP_TIMES.values()],
        rows,
    )
    record = {"runs": args.runs, "variants": names, "points": summary, "run_dir": str(out), "per_run": results}
    finish(NAME, record, args.smoke)


if __name__ == "__main__":
    main()
