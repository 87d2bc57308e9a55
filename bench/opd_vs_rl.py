"""Learning efficiency: steps and wall-clock for opd vs rl to reach 90 % of the teacher's eval reward, from the
same warm start (the default tiny student), each with its reference experiment (`experiment=opd`,
`experiment=rl`) and only the eval interval, the seed and rl's max_steps (its budget) changed; opd keeps the
experiment's own max_steps, where its cosine learning rate ends.

The teacher's eval reward is the opd run's `eval/teacher_reward` (measured at step 0 on the same eval prompts,
same sampling); the rl run of the same seed is held to the same target. A run stops as soon as one of its eval
rows reaches the target (--full runs every step), so steps-to-target has the resolution of --eval-interval.
Seconds are counted from `python launch.py` (start-up included: opd starts two vLLM servers, in parallel) and
also from the run's first trainer step.

    .venv/bin/python bench/opd_vs_rl.py --runs 3          # full: ~25-35 min on the 2-core machine
    .venv/bin/python bench/opd_vs_rl.py --runs 1 --rl-steps 3 --opd-steps 3 --eval-interval 2 --smoke
"""

import argparse
import math
import statistics
from pathlib import Path

from common import (
    add_runs_arg,
    add_target_args,
    bench_dir,
    compose,
    finish,
    median,
    print_table,
    reached,
    run_launcher,
    shown,
    steps_to_target,
    teacher_reward,
)

NAME = "opd_vs_rl"


def overrides(mode: str, steps: int, args, seed: int) -> list[str]:
    return [
        f"experiment={mode}",
        *([f"max_steps={steps}"] if steps else []),  # 0: the experiment's own (opd's lr decays to 0 there)
        f"orchestrator.eval.interval={args.eval_interval}",
        "monitor=off",
        f"seed={seed}",
    ]


def run_mode(mode: str, steps: int, args, seed: int, out: Path, target: float | None) -> dict:
    """One run; `target` None means: 90 % of the teacher reward this run itself measures (opd)."""
    target_of = (
        (lambda rows: target)
        if target is not None
        else (lambda rows: args.fraction * teacher_reward(rows) if teacher_reward(rows) is not None else None)
    )
    stop_when = None if args.full else (lambda rows: reached(rows, target_of(rows)) is not None)
    launch = run_launcher(
        overrides(mode, steps, args, seed), out / f"{mode}-{seed}", timeout_s=args.timeout, stop_when=stop_when
    )
    rows, goal = launch.rows, target_of(launch.rows)
    hit = reached(rows, goal)
    train = launch.train_rows()
    evals = launch.eval_rows()
    return {
        "ok": launch.ok or hit is not None,
        "teacher_reward": teacher_reward(rows),
        "target": goal,
        "target_step": hit[1] if hit else None,
        "target_s": hit[0] if hit else None,
        "target_s_from_step0": hit[0] - train[0][0] if hit and train else None,
        "steps_run": len(train),
        "eval_first": evals[0][1]["eval/reward"] if evals else None,
        "eval_last": evals[-1][1]["eval/reward"] if evals else None,
        "curve": [(t, r["step"], r["eval/reward"]) for t, r in evals],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--rl-steps", type=int, default=400, help="rl's step budget (it needed ~330 in earlier runs)")
    parser.add_argument("--opd-steps", type=int, default=0, help="opd's step budget (0: experiment=opd's max_steps)")
    add_target_args(parser, eval_interval=10, timeout=3600)
    parser.add_argument("--full", action="store_true", help="run every step instead of stopping at the target")
    args = parser.parse_args()

    from prime_rl.models import student_dir
    from prime_rl.prepare import prepare_student, prepare_teacher

    opd_cfg, rl_cfg = compose(overrides("opd", 1, args, 0)), compose(overrides("rl", 1, args, 0))
    if student_dir(opd_cfg) != student_dir(rl_cfg):
        raise SystemExit("opd and rl would start from different students; this benchmark needs the same warm start")
    prepare_student(rl_cfg), prepare_teacher(opd_cfg)  # built (or taken from the cache) before any clock starts
    budgets = {"opd": args.opd_steps or compose(overrides("opd", 0, args, 0)).max_steps, "rl": args.rl_steps}
    out = bench_dir(NAME)
    runs = []
    for seed in range(args.runs):
        print(f"run {seed + 1}/{args.runs}", flush=True)
        opd = run_mode("opd", args.opd_steps, args, seed, out, target=None)
        rl = run_mode("rl", args.rl_steps, args, seed, out, target=opd["target"])
        runs.append({"seed": seed, "opd": opd, "rl": rl})
    report(args, runs, budgets, out)


def steps_ratio(opd: float, rl: float, budgets: dict) -> str:
    """opd / rl steps; a bound when one side did not reach the target within its budget."""
    if opd == math.inf and rl == math.inf:
        return "?"
    if rl == math.inf:
        return f"< {opd / budgets['rl']:.3f}"
    if opd == math.inf:
        return f"> {budgets['opd'] / rl:.3f}"
    return f"{opd / rl:.3f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def report(args, runs: list[dict], budgets: dict, out: Path) -> None:
    keys = ["teacher_reward", "target", "target_s", "target_s_from_step0", "eval_first", "eval_last"]
    med = {mode: {k: median(r[mode][k] for r in runs) for k in keys} for mode in ("opd", "rl")}
    steps = {mode: [steps_to_target(r[mode]) for r in runs] for mode in ("opd", "rl")}
    med_steps = {mode: statistics.median(steps[mode]) for mode in steps}
    print_table(
        f"opd vs rl to {args.fraction:.0%} of the teacher's eval reward: medians of {args.runs} run(s) "
        "(seconds: of the runs that reached it)",
        ["mode", "teacher", "target", "steps (per run)", "s from launch", "s from step 0", "eval first", "eval last"],
        [
            [mode, med[mode]["teacher_reward"], med[mode]["target"]]
            + [f"{shown(med_steps[mode], budgets[mode])} ({', '.join(shown(v, budgets[mode]) for v in steps[mode])})"]
            + [med[mode][k] for k in keys[2:]]
            for mode in ("opd", "rl")
        ],
    )
    step_ratios = [steps_ratio(o, r, budgets) for o, r in zip(steps["opd"], steps["rl"])]
    wall_ratios = [ratio(r["opd"]["target_s"], r["rl"]["target_s"]) for r in runs]
    median_ratio = steps_ratio(med_steps["opd"], med_steps["rl"], budgets)
    print(
        f"opd / rl steps to target: {median_ratio} (ratio of the medians; per run {step_ratios}; a bound where a "
        f"run did not reach the target within its budget, opd {budgets['opd']}, rl {budgets['rl']}); "
        f"wall-clock: {median(wall_ratios)} (per run {wall_ratios})"
    )
    finish(
        NAME,
        {
            "runs": args.runs,
            "eval_interval": args.eval_interval,
            "fraction": args.fraction,
            "median": med,
            "budgets": budgets,
            "target_steps": {mode: [shown(v, budgets[mode]) for v in steps[mode]] for mode in steps},
            "steps_ratio_opd_over_rl": median_ratio,
            "per_run_steps_ratios": step_ratios,
            "wall_ratio_opd_over_rl": median(wall_ratios),
            "per_run": runs,
            "run_dir": str(out),
        },
        args.smoke,
    )


if __name__ == "__main__":
    main()
