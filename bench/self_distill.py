"""opsd (on-policy self-distillation) against rl and opd, from the same warm start with the same steps and batch:
the eval reward against steps and against wall-clock, the completion tokens each run generated until its eval
first reached rl's final eval reward (same seed), and the price of a step (the self-scoring's share of it).

Every variant runs the default rl shape (orchestrator.batch_size=128 of 16 prompts x 8, max_async_level=1); opd's
teacher is the built-in local one (trained longer), opsd scores with the student's own server under the reference
answer (modes.opsd.context's default), with the live policy, the starting weights (θ0) or a copy of the policy
refreshed every 10 steps (modes.opsd.teacher). teacher_tau is 1.0 in opd and opsd, adv_tau 1.0 in all.
model=tiny_reader is the built-in model that reads its context (the answer a system message shows it).

    .venv/bin/python bench/self_distill.py --runs 3                       # ~20 min on the 2-core machine
    .venv/bin/python bench/self_distill.py --runs 3 --model tiny_qwen3
    .venv/bin/python bench/self_distill.py --runs 3 --model tiny_reader \
        --variants rl,opd,opsd,opsd_initial,opsd_lagged                    # ~45 min
    .venv/bin/python bench/self_distill.py --runs 1 --steps 4 --eval-interval 2 --smoke
"""

import argparse
from pathlib import Path

from common import add_runs_arg, bench_dir, compare_variants, finish, median, print_table, run_launcher, run_outcome

NAME = "self_distill"
VARIANTS = {
    "rl": [],
    "opd": ["training_mode=opd", "teacher=local_vllm"],
    "opsd": ["training_mode=opsd"],
    "opsd_tau0.1": ["training_mode=opsd", "trainer.loss.teacher_tau=0.1"],  # the rewards' advantage dominates
    "opsd_initial": ["training_mode=opsd", "modes.opsd.teacher=initial"],  # θ0: a server of the starting weights
    "opsd_lagged": ["training_mode=opsd", "modes.opsd.teacher=lagged", "modes.opsd.lag=10"],  # loaded into that one
}


def run_variant(args, variant: str, seed: int, out: Path) -> dict:
    overrides = [
        f"model={args.model}",
        f"max_steps={args.steps}",
        f"orchestrator.eval.interval={args.eval_interval}",
        "monitor=off",
        f"seed={seed}",
        *VARIANTS[variant],
    ]
    launch = run_launcher(overrides, out / f"{args.model}-{variant}-{seed}", timeout_s=args.timeout)
    train = launch.train_rows()
    batch = 128  # orchestrator.batch_size's default: samples per step
    tokens, total = {}, 0.0
    for _, row in train:
        total += row.get("seq_len/completion", 0.0) * batch
        tokens[row["step"]] = total
    steady = [r for _, r in train if r["step"] >= 1]
    privileged = [r["eval/privileged_reward"] for _, r in train if "eval/privileged_reward" in r]
    return run_outcome(launch) | {
        "privileged_first": privileged[0] if privileged else None,  # opsd: the eval shown the answer, at step 0
        "step_s": median(r.get("time/step") for r in steady),
        "score_s": median(r.get("time/self_score", r.get("time/teacher")) for r in steady),
        "curve": [(t, r["step"], r["eval/reward"], tokens.get(r["step"] - 1, 0.0)) for t, r in launch.eval_rows()],
    }


def tokens_to_reach(run: dict, target: float | None) -> float | None:
    """Completion tokens generated before the run's first eval at or above `target` (None: it never got there)."""
    if target is None:
        return None
    return next((tokens for _, _, reward, tokens in run["curve"] if reward >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--model", default="tiny", help="the model group: tiny | tiny_qwen3 | tiny_reader")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps of every run")
    parser.add_argument("--eval-interval", type=int, default=20, help="evaluate every N steps (the curve's points)")
    parser.add_argument("--variants", default="rl,opd,opsd", help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    args = parser.parse_args()
    out = bench_dir(NAME)
    variants = args.variants.split(",")
    per_run, medians = compare_variants(args.runs, variants, lambda v, seed: run_variant(args, v, seed, out))
    for runs in per_run:  # each run held to the final eval of rl with the same seed (where rl ran)
        target = runs["rl"]["eval_last"] if "rl" in runs else None
        for run in runs.values():
            run["tokens_to_rl_final"] = tokens_to_reach(run, target)
    for variant in variants:
        for key in ("tokens_to_rl_final", "privileged_first"):
            medians[variant][key] = median(r[variant][key] for r in per_run)
    headers = ["mode", "eval step 0", "shown the answer", f"eval step {args.steps}", "tokens to rl's final", "s/step"]
    rows = [
        [v, m["eval_first"], m["privileged_first"], m["eval_last"], m["tokens_to_rl_final"], m["step_s"]]
        for v, m in medians.items()
    ]
    print_table(f"opsd vs rl and opd ({args.model}, medians of {args.runs})", headers, rows)
    finish(NAME, {"model": args.model, "steps": args.steps, "runs": per_run, "medians": medians}, args.smoke)


if __name__ == "__main__":
    main()
