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

`--task` runs every variant on another task (its overrides, e.g. reasoning-gym's spell_backward), and
`--eval-interval` evaluates along the way, which adds the eval reward at a fixed wall-clock: each run's last eval
at or before the plain run's (same seed) last one.

    .venv/bin/python bench/sample_selection.py --runs 3 --eval-interval 20 --task "task=reasoning_gym \
        task.dataset=spell_backward +task.options.max_word_len=6 model.warm_start.steps=160"
    .venv/bin/python bench/sample_selection.py --runs 3 --variants plain,difficulty --task task.num_train=200
"""

import argparse
import shlex
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


def base(args, seed: int) -> list[str]:
    """Every variant's overrides: a fixed number of steps, evaluated at the end or every --eval-interval steps."""
    steps = fixed_steps(args.steps, seed)
    if args.eval_interval:
        steps = [o for o in steps if not o.startswith("orchestrator.eval.interval=")]
        steps.append(f"orchestrator.eval.interval={args.eval_interval}")
    return [*steps, f"task.verifier={args.verifier}", *shlex.split(args.task)]


def run_variant(args, variant: str, seed: int, out: Path) -> dict:
    launch = run_launcher([*base(args, seed), *VARIANTS[variant]], out / f"{variant}-{seed}", timeout_s=args.timeout)
    train = [r for _, r in launch.train_rows()]
    return {
        **run_outcome(launch),
        "curve": [(t, r["step"], r["eval/reward"]) for t, r in launch.eval_rows()],
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
    parser.add_argument("--task", default="", help="overrides of another task, e.g. 'task=reasoning_gym …'")
    parser.add_argument("--eval-interval", type=int, default=0, help="evaluate every N steps (0: at the end only)")
    args = parser.parse_args()
    from prime_rl.prepare import prepare_student

    prepare_student(compose(base(args, 0)))  # before any clock
    out, names = bench_dir(NAME), args.variants.split(",")
    runs, summary = compare_variants(args.runs, names, lambda v, seed: run_variant(args, v, seed, out))
    if "plain" in names and args.eval_interval:
        for v in names:
            summary[v]["eval_at_plain_wall"] = median(at_plain_wall_clock(run, v) for run in runs)
    print_table(
        f"sample selection, {args.task or 'the default run'}, {args.verifier} reward, {args.steps} steps: "
        f"medians of {args.runs} run(s)",
        ["variant", "eval first", "eval last", "± stderr", "steps/min", "wall s", "uniform", "extra prompts", "held"]
        + ["eval @ plain's wall"],
        [[v, *(summary[v][k] for k in KEYS), summary[v].get("eval_at_plain_wall")] for v in names],
    )
    record = {
        "runs": args.runs,
        "steps": args.steps,
        "verifier": args.verifier,
        "task": args.task,
        "eval_interval": args.eval_interval,
        "variants": summary,
        "per_run": runs,
    }
    finish(NAME, record, args.smoke)


def at_plain_wall_clock(run: dict, variant: str) -> float | None:
    """The variant's last eval reward at or before the time (from launch) of the plain run's last eval."""
    if not run["plain"]["curve"]:
        return None
    deadline = run["plain"]["curve"][-1][0]
    rewards = [reward for t, _, reward in run[variant]["curve"] if t <= deadline]
    return rewards[-1] if rewards else None


if __name__ == "__main__":
    main()
