"""What a step trains on (issue 30), measured: DAPO's dynamic sampling, the difficulty filter and DAPO's two length
shapings against the plain run, on the default run's settings (colocated, the reverse task, 16 prompts x 8), for the
same number of steps; `--verifier exact` scores with exact match instead of similarity (most early groups all
wrong: where the filters act).

Variants: plain; dynamic (orchestrator.dynamic_sampling.enabled); difficulty (orchestrator.difficulty.enabled);
overlong (orchestrator.length.overlong_buffer=4, of max_tokens 16); masked (orchestrator.length.mask_truncated). Per
variant, medians over seeds: the eval reward at the last step (128 prompts; its standard error beside it),
steps/min, the wall-clock of the whole run, and the shares the variant acts on (groups without signal, refill
prompts, prompts held back at the end, cut replies).

    .venv/bin/python bench/sample_selection.py --runs 3                # ~15 min on the 2-core machine
    .venv/bin/python bench/sample_selection.py --runs 3 --verifier exact --variants plain,dynamic,difficulty
    .venv/bin/python bench/sample_selection.py --runs 1 --steps 6 --smoke
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
)

NAME = "sample_selection"
VARIANTS = {
    "plain": [],
    "dynamic": ["orchestrator.dynamic_sampling.enabled=true"],
    "difficulty": ["orchestrator.difficulty.enabled=true"],
    "overlong": ["orchestrator.length.overlong_buffer=4"],
    "masked": ["orchestrator.length.mask_truncated=true"],
}


def run_variant(args, variant: str, seed: int, out: Path) -> dict:
    overrides = [*fixed_steps(args.steps, seed), f"task.verifier={args.verifier}", *VARIANTS[variant]]
    launch = run_launcher(overrides, out / f"{variant}-{seed}", timeout_s=args.timeout)
    train = [r for _, r in launch.train_rows()]
    return {
        **run_outcome(launch),
        "groups_uniform": median(r.get("groups/uniform") for r in train),
        "extra_prompts": median(r.get("sampling/extra_prompts") for r in train),
        "truncated": median(r.get("seq_len/truncated") for r in train),
        "held_back": train[-1].get("difficulty/waiting") if train else None,
    }


KEYS = [
    "eval_first",
    "eval_last",
    "eval_last_stderr",
    "steps_per_min",
    "wall_s",
    "groups_uniform",
    "extra_prompts",
    "held_back",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps per run")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("--verifier", default="similarity", help="task.verifier of every run: similarity | exact")
    args = parser.parse_args()
    from prime_rl.prepare import prepare_student

    prepare_student(compose([*fixed_steps(args.steps, 0), f"task.verifier={args.verifier}"]))  # before any clock
    out, names = bench_dir(NAME), args.variants.split(",")
    runs, summary = compare_variants(args.runs, names, lambda v, seed: run_variant(args, v, seed, out))
    print_table(
        f"sample selection, the default run's settings, {args.verifier} reward, {args.steps} steps: "
        f"medians of {args.runs} run(s)",
        ["variant", "eval first", "eval last", "± stderr", "steps/min", "wall s", "uniform", "extra prompts", "held"],
        [[v, *(summary[v][k] for k in KEYS)] for v in names],
    )
    record = {"runs": args.runs, "steps": args.steps, "verifier": args.verifier, "variants": summary, "per_run": runs}
    finish(NAME, record, args.smoke)


if __name__ == "__main__":
    main()
