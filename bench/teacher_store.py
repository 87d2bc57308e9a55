"""The teacher-signal store (teacher.cache_dir): what opd asks its teacher over two epochs and over a 3-point
teacher_tau sweep, with the store against without, on the student's own samples (modes.opd.on_policy=1, today's
opd) and on fixed completions (on_policy=0: the reference answers, GKD's off-policy end).

Every run: opd with the local teacher on the default task, 64 prompts (4 steps of 16 x 8: two epochs in 8 steps),
the top-k (8) JSD. Per seed and per share: one run without a store (it asks the teacher for every sample, 128 a
step), then the sweep's three points (teacher_tau 1, 0.5, 2) one after the other on one fresh store, the first of
which is the store's 2-epoch run. Medians over seeds of: the sequences the teacher was asked in each epoch
(teacher/store_misses), the teacher's seconds a step (time/teacher) in each epoch, the run's wall-clock, and the
final eval (the store returns what the teacher said: learning at equal steps should match the run without).

    .venv/bin/python bench/teacher_store.py --runs 3             # ~25 min on the 2-core machine
    .venv/bin/python bench/teacher_store.py --runs 1 --smoke
"""

import argparse
from pathlib import Path

from common import add_runs_arg, bench_dir, finish, median, print_table, run_launcher, run_outcome

NAME = "teacher_store"
PROMPTS, PER_STEP, STEPS = 64, 16, 8
BATCH = 128  # orchestrator.batch_size's default: every sample of an opd step is scored
SHARES = {"on_policy": 1, "fixed": 0}
TAUS = (1.0, 0.5, 2.0)


def overrides(share: float, tau: float, seed: int) -> list[str]:
    return [
        "training_mode=opd",
        "trainer.loss.distill=topk",
        "trainer.loss.distill_top_k=8",
        "trainer.loss.distill_kl=jsd",
        f"modes.opd.on_policy={share}",
        f"trainer.loss.teacher_tau={tau}",
        f"task.num_train={PROMPTS}",
        f"max_steps={STEPS}",
        f"orchestrator.eval.interval={STEPS}",
        "monitor=off",
        f"seed={seed}",
    ]


def measured(launch, stored: bool) -> dict:
    train = [r for _, r in launch.train_rows()]
    epoch = PROMPTS // PER_STEP
    asked = [r.get("teacher/store_misses", 0) if stored else BATCH for r in train]
    return (
        run_outcome(launch)
        | {
            "asked_epoch1": sum(asked[:epoch]),
            "asked_epoch2": sum(asked[epoch:]),
            "teacher_s_epoch1": median(r.get("time/teacher") for r in train[1:epoch]),  # step 0 also warms up
            "teacher_s_epoch2": median(r.get("time/teacher") for r in train[epoch:]),
        }
    )


def run_seed(seed: int, out: Path) -> dict:
    """Per share: the run without a store, then the sweep's points on one store."""
    runs = {}
    for name, share in SHARES.items():
        alone = run_launcher(overrides(share, TAUS[0], seed), out / f"{name}-none-{seed}")
        runs[f"{name}/none"] = measured(alone, False)
        store = out / f"store-{name}-{seed}"
        for i, tau in enumerate(TAUS):
            run_dir = out / f"{name}-tau{tau}-{seed}"
            launch = run_launcher([*overrides(share, tau, seed), f"teacher.cache_dir={store}"], run_dir)
            runs[f"{name}/store point {i + 1}"] = measured(launch, True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    args = parser.parse_args()
    out = bench_dir(NAME)
    per_run = []
    for seed in range(args.runs):  # seeds outermost: a slow drift of the machine hits every variant alike
        print(f"run {seed + 1}/{args.runs}", flush=True)
        per_run.append(run_seed(seed, out))
    keys = ["asked_epoch1", "asked_epoch2", "teacher_s_epoch1", "teacher_s_epoch2", "wall_s", "eval_last"]
    medians = {v: {k: median(r[v][k] for r in per_run) for k in keys} for v in per_run[0]}
    headers = ["run", "asked, epoch 1", "asked, epoch 2", "teacher s/step e1", "e2", "wall s", "eval last"]
    rows = [[v, *(m[k] for k in keys)] for v, m in medians.items()]
    print_table(f"the teacher-signal store, opd top-k JSD, {STEPS} steps (medians of {args.runs})", headers, rows)
    finish(NAME, {"steps": STEPS, "prompts": PROMPTS, "runs": per_run, "medians": medians}, args.smoke)


if __name__ == "__main__":
    main()
