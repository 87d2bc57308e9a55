"""Learning efficiency: steps and wall-clock for opd vs rl to reach 90 % of the teacher's eval reward, from the
same warm start (the default tiny student), each with its reference experiment (`experiment=opd`,
`experiment=rl`) and only max_steps, the eval interval and the seed changed.

The teacher's eval reward is the opd run's `eval/teacher_reward` (measured at step 0 on the same eval prompts,
same sampling); the rl run of the same seed is held to the same target. A run stops as soon as one of its eval
rows reaches the target (--full runs every step), so steps-to-target has the resolution of --eval-interval.
Seconds are counted from `python launch.py` (start-up included: opd starts two vLLM servers, in parallel) and
also from the run's first trainer step.

    .venv/bin/python bench/opd_vs_rl.py --runs 3          # full: ~25-35 min on the 2-core machine
    .venv/bin/python bench/opd_vs_rl.py --runs 1 --rl-steps 3 --opd-steps 3 --eval-interval 2 --smoke
"""

import argparse
from pathlib import Path

from common import add_runs_arg, bench_dir, compose, finish, median, print_table, run_launcher

NAME = "opd_vs_rl"
Rows = list[tuple[float, dict]]


def overrides(mode: str, steps: int, args, seed: int) -> list[str]:
    return [
        f"experiment={mode}",
        f"max_steps={steps}",
        f"orchestrator.eval.interval={args.eval_interval}",
        "monitor=off",
        f"seed={seed}",
    ]


def teacher_reward(rows: Rows) -> float | None:
    return next((r["eval/teacher_reward"] for _, r in rows if "eval/teacher_reward" in r), None)


def reached(rows: Rows, target: float | None) -> tuple[float, int] | None:
    """(arrival time, step) of the first eval row at or above the target."""
    if target is None:
        return None
    return next(((t, r["step"]) for t, r in rows if r.get("eval/reward", -1.0) >= target), None)


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
    parser.add_argument("--rl-steps", type=int, default=300, help="rl's step budget (it needed ~240 in earlier runs)")
    parser.add_argument("--opd-steps", type=int, default=200, help="opd's step budget")
    parser.add_argument("--eval-interval", type=int, default=10, help="evaluate every N steps (the step resolution)")
    parser.add_argument("--fraction", type=float, default=0.9, help="target = this x the teacher's eval reward")
    parser.add_argument("--full", action="store_true", help="run every step instead of stopping at the target")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    args = parser.parse_args()

    from prime_rl.models import student_dir
    from prime_rl.prepare import prepare_student, prepare_teacher

    opd_cfg, rl_cfg = compose(overrides("opd", 1, args, 0)), compose(overrides("rl", 1, args, 0))
    if student_dir(opd_cfg) != student_dir(rl_cfg):
        raise SystemExit("opd and rl would start from different students; this benchmark needs the same warm start")
    prepare_student(rl_cfg), prepare_teacher(opd_cfg)  # built (or taken from the cache) before any clock starts
    out = bench_dir(NAME)
    runs = []
    for seed in range(args.runs):
        print(f"run {seed + 1}/{args.runs}", flush=True)
        opd = run_mode("opd", args.opd_steps, args, seed, out, target=None)
        rl = run_mode("rl", args.rl_steps, args, seed, out, target=opd["target"])
        runs.append({"seed": seed, "opd": opd, "rl": rl})
    report(args, runs, out)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def report(args, runs: list[dict], out: Path) -> None:
    keys = ["teacher_reward", "target", "target_step", "target_s", "target_s_from_step0", "eval_first", "eval_last"]
    med = {mode: {k: median(r[mode][k] for r in runs) for k in keys} for mode in ("opd", "rl")}
    print_table(
        f"opd vs rl to {args.fraction:.0%} of the teacher's eval reward: medians of {args.runs} run(s)",
        ["mode", "teacher", "target", "steps", "s from launch", "s from step 0", "eval first", "eval last"],
        [[mode] + [med[mode][k] for k in keys] for mode in ("opd", "rl")],
    )
    step_ratios = [ratio(r["opd"]["target_step"], r["rl"]["target_step"]) for r in runs]
    wall_ratios = [ratio(r["opd"]["target_s"], r["rl"]["target_s"]) for r in runs]
    print(
        f"opd / rl steps to target: {median(step_ratios)} (per run {step_ratios}); "
        f"wall-clock: {median(wall_ratios)} (per run {wall_ratios}); '—' / None = not reached within the budget"
    )
    finish(
        NAME,
        {
            "runs": args.runs,
            "rl_steps": args.rl_steps,
            "opd_steps": args.opd_steps,
            "eval_interval": args.eval_interval,
            "fraction": args.fraction,
            "median": med,
            "steps_ratio_opd_over_rl": median(step_ratios),
            "wall_ratio_opd_over_rl": median(wall_ratios),
            "per_run": runs,
            "run_dir": str(out),
        },
        args.smoke,
    )


if __name__ == "__main__":
    main()
