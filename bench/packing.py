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

from common import (
    add_runs_arg,
    bench_dir,
    compare_variants,
    compose,
    finish,
    fixed_steps,
    median,
    print_table,
    run_launcher,
    run_outcome,
    steady_rows,
)

NAME = "packing"
SETTINGS = {
    "default": [],
    "long": ["+task.options.min_len=48", "+task.options.max_len=64", "orchestrator.sampling.max_tokens=80"],
}


def overrides(args, setting: str, seed: int) -> list[str]:
    return [*fixed_steps(args.steps, seed), *SETTINGS[setting]]


def run_variant(args, variant: str, seed: int, out: Path) -> dict:
    setting, pack = variant.split("/")
    launch = run_launcher(
        [*overrides(args, setting, seed), f"trainer.pack_tokens={pack}"], out / f"{setting}-{pack}-{seed}", args.timeout
    )
    rows = steady_rows(launch)
    return {
        **run_outcome(launch),
        "train_tokens_per_s": median(r.get("throughput/train_tokens_per_s") for r in rows),
        "train_s": median(r.get("time/train") for r in rows),
        "padding": median(r.get("throughput/padding_fraction") for r in rows),
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

    settings, packs = args.settings.split(","), ["0", *args.pack_tokens.split(",")]
    for setting in settings:
        prepare_student(compose(overrides(args, setting, 0)))  # built before any clock starts
    out, names = bench_dir(NAME), [f"{s}/{p}" for s in settings for p in packs]
    runs, summary = compare_variants(args.runs, names, lambda v, seed: run_variant(args, v, seed, out))
    print_table(
        f"sequence packing, colocated, {args.steps} steps: medians of {args.runs} run(s)",
        ["setting / pack_tokens", "train tok/s", "train s", "padding", "steps/min", "eval last"],
        [[v, *(summary[v][k] for k in KEYS)] for v in names],
    )
    finish(NAME, {"runs": args.runs, "steps": args.steps, "variants": summary, "per_run": runs}, args.smoke)


if __name__ == "__main__":
    main()
