"""One node against two: the same rl run as a SLURM job of the local cluster's namespace nodes (`bash .ci/slurm up
--nodes 3`, partition `multi`), on one node, and on two (the student's server on node 0, orchestrator and trainer
on node 1) with the weights handed over as files in the shared run dir or pushed over gloo across the bridge.

The nodes share this machine's cores (they are network namespaces, not machines): what the second node costs here
is the split itself (roles at once instead of in turns, requests and weights over the bridge), not more compute.
Each run evaluates at its first and last step (the eval rewards show it learnt as much either way). The clock
starts when the benchmark starts `python launch.py -m hydra/launcher=slurm ...` (submission, the job's
start and its servers included); steps/min counts from the first trained step to the last.

    .venv/bin/python bench/multinode.py --runs 3        # full: ~10 min on the 2-core machine
    .venv/bin/python bench/multinode.py --runs 1 --steps 3 --smoke
"""

import argparse
import sys

from common import (
    Launch,
    add_runs_arg,
    bench_dir,
    compare_variants,
    finish,
    fixed_steps,
    median,
    print_table,
    run_outcome,
    run_stamped,
    steady_rows,
    step_times,
)

from prime_rl.protocol.metrics import MetricsTail

NAME = "multinode"
ONE_NODE = ["deployment=local"]
TWO_NODES = ["deployment=local", "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"]
VARIANTS = {
    "1 node": ONE_NODE,  # its default layout: every role in turns with both cores
    "2 nodes, files": TWO_NODES,
    "2 nodes, gloo": [*TWO_NODES, "inference.weight_transfer=gloo"],
}
HANDOFF = {"time/reload": "reload", "time/push": "push", "time/export": "export"}


def run_job(overrides: list[str], sweep_dir, steps: int, seed: int) -> Launch:
    """One SLURM job of the `multi` partition, waited for by its sweep; its metrics rows time-stamped."""
    run = [*fixed_steps(steps, seed), "ckpt.interval=0"]
    argv = [sys.executable, "launch.py", "-m", "hydra/launcher=slurm", "hydra.launcher.partition=multi", *overrides]
    argv += [*run, f"hydra.sweep.dir={sweep_dir}"]
    process, rows = run_stamped(
        argv,
        sweep_dir.parent / f"{sweep_dir.name}.console.log",
        timeout_s=1200,
        metrics=MetricsTail(sweep_dir / "0" / "metrics.jsonl"),
    )
    return Launch(sweep_dir / "0", process, rows)


def measure(launch: Launch) -> dict:
    rows = steady_rows(launch)
    stamps = [t for t, _ in launch.train_rows()]
    return {
        **run_outcome(launch),
        "first_step_s": stamps[0] if stamps else None,
        **{HANDOFF[k]: median(r.get(k) for r in rows) for k in HANDOFF},
        **{k: v for k, v in step_times(rows).items() if k in ("time/step", "time/generate", "time/train")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=60, help="steps per run (evaluated at the first and the last)")
    args = parser.parse_args()
    out = bench_dir(NAME)

    def run_one(variant: str, seed: int) -> dict:
        print(f"  {variant}", flush=True)
        return measure(
            run_job(VARIANTS[variant], out / f"{variant.replace(' ', '_').replace(',', '')}-{seed}", args.steps, seed)
        )

    per_run, med = compare_variants(args.runs, list(VARIANTS), run_one)
    keys = ["wall_s", "first_step_s", "steps_per_min", "time/step", "time/generate", "time/train"]
    print_table(
        f"one node vs two: medians of {args.runs} run(s) of {args.steps} steps, seconds",
        ["variant", "wall", "launch->step 0", "steps/min", "step", "generate", "train", *HANDOFF.values()],
        [[v, *(med[v][k] for k in keys), *(med[v][h] for h in HANDOFF.values())] for v in VARIANTS],
    )
    print_table(
        "what it learnt: eval reward (the task's held-out prompts, greedy), medians",
        ["variant", "step 0", f"step {args.steps}"],
        [[v, med[v]["eval_first"], med[v]["eval_last"]] for v in VARIANTS],
    )
    finish(NAME, {"steps": args.steps, "runs": args.runs, "median": med, "per_run": per_run}, args.smoke)


if __name__ == "__main__":
    main()
