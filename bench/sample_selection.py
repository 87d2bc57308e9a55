"""What a step trains on (issue 30), measured: DAPO's dynamic sampling and its two length shapings against the plain
run, on the default run's settings (colocated, the reverse task, 16 prompts x 8), for the same number of steps.

Variants: plain; dynamic (orchestrator.dynamic_sampling.enabled); overlong (orchestrator.length.overlong_buffer=4,
of max_tokens 16); masked (orchestrator.length.mask_truncated). Per variant, medians over seeds: the eval reward at
the last step (128 prompts; its standard error beside it), steps/min, the wall-clock of the whole run, and the
shares the variant acts on (groups without signal, refill prompts, cut replies).

    .venv/bin/python bench/sample_selection.py --runs 3                # ~15 min on the 2-core machine
    .venv/bin/python bench/sample_selection.py --runs 1 --steps 6 --smoke
"""

import argparse
from pathlib import Path

from common import add_runs_arg, bench_dir, compose, finish, median, print_table, run_launcher

NAME = "sample_selection"
VARIANTS = {
    "plain": [],
    "dynamic": ["orchestrator.dynamic_sampling.enabled=true"],
    "overlong": ["orchestrator.length.overlong_buffer=4"],
    "masked": ["orchestrator.length.mask_truncated=true"],
}


def overrides(args, seed: int) -> list[str]:
    return [f"max_steps={args.steps}", f"orchestrator.eval.interval={args.steps}", "monitor=off", f"seed={seed}"]


def run_variant(args, variant: str, seed: int, out: Path) -> dict:
    launch = run_launcher([*overrides(args, seed), *VARIANTS[variant]], out, timeout_s=args.timeout)
    train = [r for _, r in launch.train_rows()]
    stamps = [t for t, _ in launch.train_rows()]
    evals = [r for _, r in launch.eval_rows()]
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else None
    return {
        "ok": launch.ok,
        "wall_s": launch.process.duration_s,
        "steps_per_min": 60 * (len(stamps) - 1) / span if span else None,
        "eval_first": evals[0]["eval/reward"] if evals else None,
        "eval_last": evals[-1]["eval/reward"] if evals else None,
        "eval_last_stderr": evals[-1].get("eval/reward_stderr") if evals else None,
        "groups_uniform": median(r.get("groups/uniform") for r in train),
        "extra_prompts": median(r.get("sampling/extra_prompts") for r in train),
        "truncated": median(r.get("seq_len/truncated") for r in train),
    }


KEYS = ["eval_first", "eval_last", "eval_last_stderr", "steps_per_min", "wall_s", "groups_uniform", "extra_prompts"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps per run")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = parser.parse_args()
    from prime_rl.prepare import prepare_student

    prepare_student(compose(overrides(args, 0)))  # built before any clock starts
    out, names = bench_dir(NAME), args.variants.split(",")
    runs = []
    for seed in range(args.runs):
        print(f"run {seed + 1}/{args.runs}", flush=True)
        runs.append({v: run_variant(args, v, seed, out / f"{v}-{seed}") for v in names})
    summary = {v: {k: median(r[v][k] for r in runs) for k in [*KEYS, "truncated"]} for v in names}
    print_table(
        f"sample selection, the default run's settings, {args.steps} steps: medians of {args.runs} run(s)",
        ["variant", "eval first", "eval last", "± stderr", "steps/min", "wall s", "uniform groups", "extra prompts"],
        [[v, *(summary[v][k] for k in KEYS)] for v in names],
    )
    finish(NAME, {"runs": args.runs, "steps": args.steps, "variants": summary, "per_run": runs}, args.smoke)


if __name__ == "__main__":
    main()
