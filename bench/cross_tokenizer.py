"""opd from a teacher with another tokenizer (docs/cross_tokenizer.md) against opd from today's teacher of the
student's tokenizer, against rl, and against sft from the same foreign teacher (the baseline a user would otherwise
choose). The foreign teacher is the built-in teacher's recipe on a byte-level BPE of the task's text (320 tokens)
with a Qwen-style chat template; the student is the default one (one token per byte, ChatML).

Per variant, medians over seeds: steps and seconds (from `python launch.py`) to 90 % of its teacher's eval reward
(the run's own `eval/teacher_reward` at step 0; rl, which has none, is measured against the foreign teacher's), the
last eval reward, the step's seconds and the teacher's share of them (the cost of alignment: opd_foreign against
opd_same), and the alignment's chunk metrics. The `_top8` variants distil from the teacher's top 8
(trainer.loss.distill=topk), across vocabularies over the tokens both have.

    .venv/bin/python bench/cross_tokenizer.py --runs 3                     # ~60 min on 2 cores
    .venv/bin/python bench/cross_tokenizer.py --runs 1 --steps 4 --eval-interval 2 --smoke
"""

import argparse
import statistics

from common import (
    add_runs_arg,
    add_target_args,
    bench_dir,
    compose,
    finish,
    median,
    print_table,
    run_to_target,
    shown,
    steady_rows,
    steps_to_target,
    teacher_reward,
)

NAME = "cross_tokenizer"
# the foreign teacher's recipe: a BPE of 320 tokens (at 512, merged letters made the reversal too hard for the tiny
# teacher: 0.16 eval reward against 0.96)
FOREIGN = ["model.tiny.tokenizer=bpe"]
TOP8 = ["trainer.loss.distill=topk", "trainer.loss.distill_top_k=8"]  # the top-k signal (BENCHMARKS.md §15's k)


def variants(foreign_dir: str) -> dict[str, list[str]]:
    return {
        "opd_same": ["experiment=opd"],
        "opd_foreign": ["experiment=opd", f"teacher.model={foreign_dir}"],
        "opd_same_top8": ["experiment=opd", *TOP8],
        "opd_foreign_top8": ["experiment=opd", f"teacher.model={foreign_dir}", *TOP8],
        "sft_foreign": ["experiment=sft", f"teacher.model={foreign_dir}"],
        "rl": ["experiment=rl"],
    }


def run_variant(args, overrides: list[str], name: str, seed: int, fallback: float | None) -> dict:
    """One run, stopped at the first eval that reaches 90 % of its teacher's reward (`fallback`: rl's teacher)."""

    def target_of(rows) -> float | None:
        teacher = teacher_reward(rows) or fallback
        return None if teacher is None else args.fraction * teacher

    steps = [f"max_steps={args.steps}"] if args.steps else []
    launch, reached_ = run_to_target(
        [*overrides, *steps, f"orchestrator.eval.interval={args.eval_interval}", "monitor=off", f"seed={seed}"],
        bench_dir(NAME) / f"{name}-{seed}",
        args.timeout,
        target_of,
    )
    rows = steady_rows(launch)
    return reached_ | {
        "teacher_reward": reached_["teacher_reward"] or fallback,
        "step_s": median(r.get("time/step") for r in rows),
        "teacher_s": median(r.get("time/teacher") for r in rows),
        "aligned_fraction": median(r.get("distill/aligned_fraction") for r in rows),
        "chunk_student_tokens": median(r.get("distill/chunk_student_tokens") for r in rows),
        "chunk_teacher_tokens": median(r.get("distill/chunk_teacher_tokens") for r in rows),
        "topk_shared_mass": median(r.get("distill/topk_shared_mass") for r in rows),
    }


COLUMNS = {  # summary key -> column header
    "teacher_reward": "teacher",
    "target_s": "s from launch",
    "eval_last": "eval last",
    "step_s": "step s",
    "teacher_s": "teacher s",
    "aligned_fraction": "1:1 share",
    "chunk_student_tokens": "student tok/chunk",
    "chunk_teacher_tokens": "teacher tok/chunk",
    "topk_shared_mass": "top-k mass shared",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=0, help="step budget (0: each experiment's max_steps)")
    add_target_args(parser)
    parser.add_argument("--variants", default="opd_foreign,opd_same,sft_foreign,rl", help="comma-separated")
    args = parser.parse_args()
    from prime_rl.prepare import prepare_student, prepare_teacher

    opd = compose(["experiment=opd"])
    foreign_dir = prepare_teacher(compose(["experiment=opd", *FOREIGN]))  # built before any clock starts
    prepare_student(opd), prepare_teacher(opd)
    table, names = variants(str(foreign_dir)), args.variants.split(",")
    runs = []
    for seed in range(args.runs):  # seeds outermost: a slow drift of the machine hits every variant alike
        print(f"run {seed + 1}/{args.runs}", flush=True)
        done: dict[str, dict] = {}
        for name in names:  # rl last: its target is the foreign teacher's level measured this seed
            foreign = done.get("opd_foreign", done.get("sft_foreign", {})).get("teacher_reward")
            done[name] = run_variant(args, table[name], name, seed, foreign if name == "rl" else None)
        runs.append(done)
    summary = {}
    for name in names:
        steps = [steps_to_target(r[name]) for r in runs]
        budget = args.steps or compose(table[name]).max_steps
        summary[name] = {k: median(r[name][k] for r in runs) for k in COLUMNS} | {
            "steps": statistics.median(steps),
            "steps_per_run": [shown(v, budget) for v in steps],
            "budget": budget,
        }
    print_table(
        f"opd from a teacher with another tokenizer, to {args.fraction:.0%} of each teacher's eval reward: medians of "
        f"{args.runs} run(s) (evals every {args.eval_interval})",
        ["variant", "steps (per run)", *COLUMNS.values()],
        [
            [name, f"{shown(s['steps'], s['budget'])} ({', '.join(s['steps_per_run'])})"] + [s[k] for k in COLUMNS]
            for name, s in summary.items()
        ],
    )
    finish(
        NAME,
        {
            "runs": args.runs,
            "eval_interval": args.eval_interval,
            "fraction": args.fraction,
            "foreign_teacher": FOREIGN,
            "variants": summary,
            "per_run": runs,
            "run_dir": str(bench_dir(NAME)),
        },
        args.smoke,
    )


if __name__ == "__main__":
    main()
