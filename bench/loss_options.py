"""The loss options of issue 31, measured against the plain run on the default run's settings (colocated, the
reverse task, 16 prompts x 8), for the same number of steps: what each does to learning, step time and memory.

Variants: plain; entropy (trainer.loss.entropy_tau=1e-3); gspo (trainer.loss.ratio_level=sequence, GSPO's clip);
kl_ref (trainer.loss.kl_ref_tau=0.05: a frozen copy of the starting weights in the trainer); packed
(trainer.pack_tokens=128). Per variant, medians over seeds: the eval reward at the last step (128 prompts; its
standard error beside it), steps/min, the trainer's step seconds, the trainer's peak resident memory, and what the
option itself reports (kl_ref; clipped/sequence; the padding share).

    .venv/bin/python bench/loss_options.py --runs 3               # ~20 min on the 2-core machine
    .venv/bin/python bench/loss_options.py --runs 1 --steps 4 --smoke
"""

import argparse
from pathlib import Path

from common import add_runs_arg, bench_dir, compose, finish, median, print_table, run_launcher

NAME = "loss_options"
VARIANTS = {
    "plain": [],
    "entropy": ["trainer.loss.entropy_tau=1e-3"],
    "gspo": ["trainer.loss.ratio_level=sequence"],
    "kl_ref": ["trainer.loss.kl_ref_tau=0.05"],
    "packed": ["trainer.pack_tokens=128"],
}


def overrides(args, seed: int) -> list[str]:
    return [f"max_steps={args.steps}", f"orchestrator.eval.interval={args.steps}", "monitor=off", f"seed={seed}"]


def run_variant(args, variant: str, seed: int, out: Path) -> dict:
    launch = run_launcher([*overrides(args, seed), *VARIANTS[variant]], out, timeout_s=args.timeout)
    stamps = [t for t, _ in launch.train_rows()]
    rows = [r for _, r in launch.train_rows() if r["step"] >= 1]  # step 0 waits for the orchestrator's start-up
    evals = [r for _, r in launch.eval_rows()]
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else None
    last = rows[-1] if rows else {}
    return {
        "ok": launch.ok,
        "eval_last": evals[-1]["eval/reward"] if evals else None,
        "eval_last_stderr": evals[-1].get("eval/reward_stderr") if evals else None,
        "steps_per_min": 60 * (len(stamps) - 1) / span if span else None,
        "train_s": median(r.get("time/train") for r in rows),
        "peak_rss_gib": last.get("memory/peak_rss_gib"),
        "kl_ref": last.get("kl_ref"),
        "clipped_sequence": median(r.get("clipped/sequence") for r in rows),
        "padding": median(r.get("throughput/padding_fraction") for r in rows),
    }


KEYS = ["eval_last", "eval_last_stderr", "steps_per_min", "train_s", "peak_rss_gib", "kl_ref", "clipped_sequence"]


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
    summary = {v: {k: median(r[v][k] for r in runs) for k in [*KEYS, "padding"]} for v in names}
    print_table(
        f"loss options, the default run's settings, {args.steps} steps: medians of {args.runs} run(s)",
        ["variant", "eval last", "± stderr", "steps/min", "train s", "peak RSS GiB", "kl_ref", "clipped/seq"],
        [[v, *(summary[v][k] for k in KEYS)] for v in names],
    )
    finish(NAME, {"runs": args.runs, "steps": args.steps, "variants": summary, "per_run": runs}, args.smoke)


if __name__ == "__main__":
    main()
