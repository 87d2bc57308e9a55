"""Launcher overhead: time from `python launch.py` to the first trainer step, minus the vLLM server's own ready
time (the launcher's "inference ready after X s").

The clock starts when the benchmark starts `python launch.py`; the first trainer step is the moment its row
appears in metrics.jsonl (polled every 0.1 s). The student model is built (or found in the cache) before the
clock starts, evaluation is off (it would add the step-0 eval to the first step). The table breaks the total
down, from the launcher's own time-stamped lines:
  before servers   launch.py start -> "started inference" (imports, Hydra compose, validation, plan)
  servers ready    the launcher's "ready after X s"
  ready -> step 0  trainer/orchestrator start-up plus step 0's own generate + train
  step 0 compute   time/generate + time/train of step 0 (work, not overhead)

    .venv/bin/python bench/launcher_overhead.py --runs 3     # full: ~4 min on the 2-core machine
    .venv/bin/python bench/launcher_overhead.py --runs 1 --smoke
"""

import argparse
from pathlib import Path

from common import add_runs_arg, bench_dir, compose, finish, median, print_table, run_launcher

NAME = "launcher_overhead"
OVERRIDES = ["max_steps=1", "orchestrator.eval.interval=0", "ckpt.interval=0", "monitor=off"]


def measure(launch) -> dict:
    rows = launch.train_rows()
    spawned = launch.process.first(r"started inference\b")
    ready_line = launch.process.first(r"\bready after [\d.]+ s")
    ready_s = launch.server_ready_s()
    if not (launch.ok and rows and spawned and ready_line and ready_s is not None):
        return {"ok": False}
    first_step_t, row = rows[0]
    compute = row["time/generate"] + row["time/train"]
    return {
        "ok": True,
        "first_step_s": first_step_t,
        "server_ready_s": ready_s,
        "overhead_s": first_step_t - ready_s,
        "overhead_minus_step0_s": first_step_t - ready_s - compute,
        "before_servers_s": spawned[0],
        "ready_to_step0_s": first_step_t - ready_line[0],
        "step0_compute_s": compute,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    args = parser.parse_args()

    from prime_rl.prepare import prepare_student

    prepare_student(compose(OVERRIDES))  # a first-ever build is not launcher overhead
    out = bench_dir(NAME)
    runs = []
    for run in range(args.runs):
        print(f"run {run + 1}/{args.runs}", flush=True)
        runs.append(measure(run_launcher(OVERRIDES, out / f"run-{run}")))
    report(args, runs, out)


def report(args, runs: list[dict], out: Path) -> None:
    keys = [
        "first_step_s",
        "server_ready_s",
        "overhead_s",
        "overhead_minus_step0_s",
        "before_servers_s",
        "ready_to_step0_s",
        "step0_compute_s",
    ]
    med = {k: median(r.get(k) for r in runs) for k in keys}
    print_table(
        f"launcher overhead: medians of {args.runs} run(s), seconds",
        [
            "launch->step 0",
            "servers ready",
            "overhead",
            "overhead - step0 compute",
            "before servers",
            "ready->step 0",
            "step 0 compute",
        ],
        [[med[k] for k in keys]],
    )
    finish(
        NAME,
        {"runs": args.runs, "overrides": OVERRIDES, "median": med, "per_run": runs, "run_dir": str(out)},
        args.smoke,
    )


if __name__ == "__main__":
    main()
