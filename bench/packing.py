"""Sequence packing (trainer.pack_tokens), measured: the trainer's step padded (one sample per row) against samples
packed into rows of a token budget, on the default run's settings and on a long-completion one (words, so
completions, of 48-64 letters: +task.options.min_len=48 +task.options.max_len=64, max_tokens 80), colocated.

Per setting and variant, medians over seeds of the runs' own metrics: training tokens per second (completion
tokens trained / the optimizer step's seconds), the step's train seconds, the share of padding in the forward
pass, steps/min, and the run's eval reward at its end (the same seed trains the same step either way, up to float
noise: packing must not change what is learned).

    .venv/bin/python bench/packing.py --runs 3                    # ~20 min on the 2-core machine
    .venv/bin/python bench/packing.py --runs 1 --steps 4 --smoke
"""

import argparse
from pathlib import Path

from common import add_runs_arg, bench_dir, compose, finish, median, print_table, run_launcher

NAME = "packing"
SETTINGS = {
    "default": [],
    "long": ["+task.options.min_len=48", "+task.options.max_len=64", "orchestrator.sampling.max_tokens=80"],
}


def overrides(args, setting: str, seed: int) -> list[str]:
    every = [f"max_steps={args.steps}", f"orchestrator.eval.interval={args.steps}", "monitor=off", f"seed={seed}"]
    return [*every, *SETTINGS[setting]]


def run_variant(args, setting: str, pack: int, seed: int, out: Path) -> dict:
    launch = run_launcher([*overrides(args, setting, seed), f"trainer.pack_tokens={pack}"], out, timeout_s=args.timeout)
    stamps = [t for t, _ in launch.train_rows()]
    rows = [r for _, r in launch.train_rows() if r["step"] >= 1]  # step 0 waits for the orchestrator's start-up
    evals = [r for _, r in launch.eval_rows()]
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else None
    return {
        "ok": launch.ok,
        "train_tokens_per_s": median(r.get("throughput/train_tokens_per_s") for r in rows),
        "train_s": median(r.get("time/train") for r in rows),
        "padding": median(r.get("throughput/padding_fraction") for r in rows),
        "steps_per_min": 60 * (len(stamps) - 1) / span if span else None,
        "eval_last": evals[-1]["eval/reward"] if evals else None,
    }


KEYS = ["train_tokens_per_s", "train_s", "padding", "steps_per_min", "eval_last"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per run")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated, of " + ", ".join(SETTINGS))
    parser.add_argument("--pack-tokens", default="128,512", help="comma-separated row budgets tried beside 0 (padded)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = parser.parse_args()
    from prime_rl.prepare import prepare_student

    settings, packs = args.settings.split(","), [0, *map(int, args.pack_tokens.split(","))]
    for setting in settings:
        prepare_student(compose(overrides(args, setting, 0)))  # built before any clock starts
    out, runs = bench_dir(NAME), []
    for seed in range(args.runs):
        print(f"run {seed + 1}/{args.runs}", flush=True)
        runs.append(
            {f"{s}/{p}": run_variant(args, s, p, seed, out / f"{s}-{p}-{seed}") for s in settings for p in packs}
        )
    summary = {v: {k: median(r[v][k] for r in runs) for k in KEYS} for v in runs[0]}
    print_table(
        f"sequence packing, colocated, {args.steps} steps: medians of {args.runs} run(s)",
        ["setting / pack_tokens", "train tok/s", "train s", "padding", "steps/min", "eval last"],
        [[v, *(summary[v][k] for k in KEYS)] for v in summary],
    )
    finish(NAME, {"runs": args.runs, "steps": args.steps, "variants": summary, "per_run": runs}, args.smoke)


if __name__ == "__main__":
    main()
