"""A mode and a teacher per source (issue 29), measured: a mix of the two built-in tasks, reverse and sort, trained
with rl on both, with rl on reverse beside opd on sort (task.mix[1].mode=opd), and with opd on both, one local
teacher warm-started on the mix teaching the opd sources; and with opd on both where each source has a teacher of
its own, warm-started on that source alone (two_teachers). Every variant runs the same steps from the same
student.

Per variant and source, medians over seeds: the eval reward at step 0 and at the last step (with its standard error:
a source "learns" when its gain exceeds 2 standard errors of the difference), the teacher's eval reward on that
source (where a teacher takes part), steps/min and the wall-clock of the whole run.

    .venv/bin/python bench/mode_mix.py --runs 3 --variants rl,rl+opd,opd     # ~15 min on the 2-core machine
    .venv/bin/python bench/mode_mix.py --runs 3 --variants two_teachers
    .venv/bin/python bench/mode_mix.py --runs 1 --steps 4 --smoke
"""

import argparse
import math
from pathlib import Path

from common import (
    add_runs_arg,
    bench_dir,
    compare_variants,
    compose,
    finish,
    fixed_steps,
    print_table,
    run_launcher,
    run_outcome,
)

NAME = "mode_mix"
SOURCES = ("reverse", "sort")
TEACHER = ["teacher=local_vllm", "trainer.loss.teacher_tau=1.0"]
VARIANTS = {
    "rl": ["task.mix=[{name:reverse},{name:sort}]"],
    "rl+opd": ["task.mix=[{name:reverse},{name:sort,mode:opd}]", *TEACHER],
    "opd": ["task.mix=[{name:reverse},{name:sort}]", "training_mode=opd", *TEACHER],
    # each source taught by its own teacher, warm-started on that source alone (good at one task only)
    "two_teachers": [
        "task.mix=[{name:reverse,teacher:rev},{name:sort,teacher:srt}]",
        "training_mode=opd",
        "teacher=none",
        "++teachers={rev:{kind:local_vllm,model:tiny},srt:{kind:local_vllm,model:tiny}}",
        "trainer.loss.teacher_tau=1.0",
    ],
}


def base(args, seed: int) -> list[str]:
    steps = [o for o in fixed_steps(args.steps, seed) if not o.startswith("orchestrator.eval.interval=")]
    return ["task=mix", *steps, f"orchestrator.eval.interval={args.eval_interval}"]


def run_variant(args, variant: str, seed: int, out: Path) -> dict:
    launch = run_launcher([*base(args, seed), *VARIANTS[variant]], out / f"{variant}-{seed}", timeout_s=args.timeout)
    evals = [r for _, r in launch.eval_rows()]
    record = run_outcome(launch)
    for label in SOURCES:
        first, last = (evals[0], evals[-1]) if evals else ({}, {})
        record |= {
            f"{label}_first": first.get(f"eval/{label}/reward"),
            f"{label}_last": last.get(f"eval/{label}/reward"),
            f"{label}_gain_se": gain_in_standard_errors(first, last, label),
            f"{label}_teacher": next(
                (r[f"eval/{label}/teacher_reward"] for r in evals if f"eval/{label}/teacher_reward" in r), None
            ),
        }
    return record


def gain_in_standard_errors(first: dict, last: dict, label: str) -> float | None:
    """The source's eval gain over the standard error of that difference (each eval a sample of prompts)."""
    key = f"eval/{label}/reward"
    if key not in first or key not in last:
        return None
    noise = math.hypot(first[f"{key}_stderr"], last[f"{key}_stderr"])
    return (last[key] - first[key]) / noise if noise else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps per run")
    parser.add_argument("--eval-interval", type=int, default=20, help="evaluate every N steps")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = parser.parse_args()
    from prime_rl.config.teachers import local_teachers, teacher_view
    from prime_rl.prepare import prepare_student, prepare_teacher

    out, names = bench_dir(NAME), args.variants.split(",")
    for name in names:  # the models, built before any clock
        cfg = compose([*base(args, 0), *VARIANTS[name]])
        prepare_student(cfg)
        for teacher in local_teachers(cfg):
            prepare_teacher(teacher_view(cfg, teacher))
    runs, summary = compare_variants(args.runs, names, lambda v, seed: run_variant(args, v, seed, out))
    columns = [f"{label} {what}" for label in SOURCES for what in ("first", "last", "gain SE", "teacher")]
    keys = [f"{label}_{what}" for label in SOURCES for what in ("first", "last", "gain_se", "teacher")]
    print_table(
        f"a mode per source, task=mix of reverse and sort, {args.steps} steps: medians of {args.runs} run(s)",
        ["variant", *columns, "steps/min", "wall s"],
        [[v, *(summary[v][k] for k in keys), summary[v]["steps_per_min"], summary[v]["wall_s"]] for v in names],
    )
    finish(NAME, {"runs": args.runs, "steps": args.steps, "variants": summary, "per_run": runs}, args.smoke)


if __name__ == "__main__":
    main()
