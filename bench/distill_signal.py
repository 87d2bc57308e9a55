"""opd's teacher signal (trainer.loss.distill): the teacher's logprob of the one token the student sampled (the
default) against the KL over the teacher's top k (k = 8, 32, and the whole vocabulary: the exact KL), each run
as `experiment=opd` with only the signal changed; and, over the top 8, GKD's generalized JSD (beta 0.5) against
the reverse KL, with GKD's on-policy share lambda (modes.opd.on_policy) at 1, 0.5 and 0 (the rest of each step's
prompts on their reference answers).

Per variant, medians over seeds: steps and seconds (from `python launch.py`) to 90 % of the teacher's eval reward
(the run's own `eval/teacher_reward` at step 0; a run stops at the first eval that reaches it, so steps have the
resolution of --eval-interval; one that never does counts as more than its budget), the step's seconds and the
teacher's share of them, the batch file the trainer reads, the trainer's peak resident memory, and the teacher's
entropy per student token (over its top k plus the tail: the exact variant gives the whole distribution's).

    .venv/bin/python bench/distill_signal.py --runs 3                       # the default task: ~40 min on 2 cores
    .venv/bin/python bench/distill_signal.py --runs 3 --model tiny_qwen3
    .venv/bin/python bench/distill_signal.py --runs 3 --variants topk8,topk8_jsd,gkd_half,gkd_fixed \
        --plot distill_signal_gkd.png
    .venv/bin/python bench/distill_signal.py --runs 1 --steps 4 --eval-interval 2 --smoke
"""

import argparse
import statistics
from pathlib import Path

from common import (
    REPO,
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

NAME = "distill_signal"


def variants(vocab: int) -> dict[str, list[str]]:
    top_k = lambda k: ["trainer.loss.distill=topk", f"trainer.loss.distill_top_k={k}"]  # noqa: E731
    jsd = [*top_k(8), "trainer.loss.distill_kl=jsd"]  # GKD's generalized JSD, beta 0.5
    return {
        "sampled": [],
        "topk8": top_k(8),
        "topk32": top_k(32),
        "exact": top_k(vocab),
        "topk8_jsd": jsd,
        "gkd_half": [*jsd, "modes.opd.on_policy=0.5"],  # GKD's lambda: half the prompts on the reference answers
        "gkd_fixed": [*jsd, "modes.opd.on_policy=0"],  # every prompt on its reference answer: no sampling
    }


def base(args, seed: int) -> list[str]:
    steps = [f"max_steps={args.steps}"] if args.steps else []  # 0: the experiment's (its cosine lr ends there)
    model = [f"model={args.model}"] if args.model else []
    return ["experiment=opd", *model, *steps, f"orchestrator.eval.interval={args.eval_interval}", "monitor=off"] + [
        f"seed={seed}"
    ]


def run_variant(args, overrides: list[str], name: str, seed: int, out: Path) -> dict:
    def target_of(rows) -> float | None:
        teacher = teacher_reward(rows)
        return None if teacher is None else args.fraction * teacher

    launch, reached_ = run_to_target([*base(args, seed), *overrides], out / f"{name}-{seed}", args.timeout, target_of)
    rows = steady_rows(launch)
    return reached_ | {
        "step_s": median(r.get("time/step") for r in rows),
        "teacher_s": median(r.get("time/teacher") for r in rows),
        "train_s": median(r.get("time/train") for r in rows),
        "batch_mib": median(r.get("batch/file_mib") for r in rows),
        "peak_rss_gib": rows[-1].get("memory/peak_rss_gib") if rows else None,
        "teacher_entropy": median(r.get("distill/teacher_entropy") for r in rows),
        "teacher_tail": median(r.get("distill/teacher_tail") for r in rows),
        "teacher_kl": median(r.get("teacher_kl") for r in rows[-10:]),
    }


COLORS = {
    "sampled": "tab:gray",
    "topk8": "tab:blue",
    "topk32": "tab:green",
    "exact": "tab:red",
    "topk8_jsd": "tab:purple",
    "gkd_half": "tab:orange",
    "gkd_fixed": "tab:brown",
}


def plot(runs: list[dict], names: list[str], target: float | None, path: Path) -> None:
    """Every run's eval reward by step, a colour per signal, and the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name in names:
        for i, run in enumerate(runs):
            steps, rewards = zip(*run[name]["curve"]) if run[name]["curve"] else ((), ())
            ax.plot(steps, rewards, color=COLORS[name], alpha=0.7, label=name if i == 0 else None)
    if target is not None:
        ax.axhline(target, color="black", linestyle=":", label="90 % of the teacher")
    ax.set_xlabel("step")
    ax.set_ylabel("eval reward")
    ax.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


COLUMNS = {  # summary key -> column header
    "teacher_reward": "teacher",
    "target_s": "s from launch",
    "eval_last": "eval last",
    "step_s": "step s",
    "teacher_s": "teacher s",
    "train_s": "train s",
    "batch_mib": "batch MiB",
    "peak_rss_gib": "peak RSS GiB",
    "teacher_entropy": "H teacher",
    "teacher_tail": "tail",
    "teacher_kl": "teacher_kl",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--model", default="", help="a model group (e.g. tiny_qwen3); default: the default model")
    parser.add_argument("--steps", type=int, default=0, help="step budget (0: experiment=opd's max_steps)")
    add_target_args(parser)
    parser.add_argument("--variants", default="sampled,topk8,topk32,exact", help="comma-separated")
    parser.add_argument("--plot", default=f"{NAME}.png", help="the curves' file name under docs/")
    args = parser.parse_args()
    from prime_rl.prepare import prepare_student, prepare_teacher

    cfg = compose(base(args, 0))
    prepare_student(cfg), prepare_teacher(cfg)  # built (or taken from the cache) before any clock starts
    budget, vocab = cfg.max_steps, cfg.model.tiny.vocab_size
    table = variants(vocab)
    names = args.variants.split(",")
    out = bench_dir(NAME)
    runs = []
    for seed in range(args.runs):  # seeds outermost: a slow drift of the machine hits every variant alike
        print(f"run {seed + 1}/{args.runs}", flush=True)
        runs.append({name: run_variant(args, table[name], name, seed, out) for name in names})
    steps = {name: [steps_to_target(r[name]) for r in runs] for name in names}
    summary = {
        name: {k: median(r[name][k] for r in runs) for k in COLUMNS}
        | {"steps": statistics.median(steps[name]), "steps_per_run": [shown(v, budget) for v in steps[name]]}
        for name in names
    }
    print_table(
        f"opd's teacher signal, {args.model or 'the default model'}, to {args.fraction:.0%} of the teacher's eval "
        f"reward: medians of {args.runs} run(s) (budget {budget} steps, evals every {args.eval_interval})",
        ["signal", "steps (per run)", *COLUMNS.values()],
        [
            [name, f"{shown(summary[name]['steps'], budget)} ({', '.join(summary[name]['steps_per_run'])})"]
            + [summary[name][k] for k in COLUMNS]
            for name in names
        ],
    )
    if not args.smoke:
        teacher = median(r[name]["teacher_reward"] for r in runs for name in names)
        target = None if teacher is None else args.fraction * teacher
        plot(runs, names, target, REPO / "docs" / args.plot)
    finish(
        NAME,
        {
            "runs": args.runs,
            "model": args.model or "default",
            "vocab": vocab,
            "budget": budget,
            "eval_interval": args.eval_interval,
            "fraction": args.fraction,
            "variants": summary,
            "per_run": runs,
            "run_dir": str(out),
        },
        args.smoke,
    )


if __name__ == "__main__":
    main()
