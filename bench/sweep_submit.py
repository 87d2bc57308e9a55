"""Sweep submission: seconds to validate and submit a 100-point sweep to the local SLURM (`bash .ci/slurm up`).

  validate only   `python launch.py -m hydra/launcher=slurm trainer.optim.lr=<100 values> launcher.dry_run=true`
                  until it exits: every point composed and validated (prime_rl/launcher/validation.py), the
                  submission printed, nothing submitted.
  one point       the same with a single value: the fixed cost (interpreter, imports, Hydra) in the above.
  submit          the same without the dry run, until the 100th array task is in the queue (`squeue -r`,
                  polled every 0.2 s); then the benchmark cancels exactly its own jobs (by their unique job
                  name) and stops the launcher, which would otherwise wait for them.
By default the jobs are submitted with `--begin=now+1hour`, so none of them starts on this small machine while
the clock runs (submission is what is measured); --no-hold submits them ready to run.

    .venv/bin/python bench/sweep_submit.py --runs 3        # full: ~3 min on the 2-core machine
    .venv/bin/python bench/sweep_submit.py --runs 1 --points 5 --smoke
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import add_runs_arg, bench_dir, finish, median, print_table, run_stamped

NAME = "sweep_submit"
POLL_S = 0.2


def sweep_command(values: list[str], sweep_dir: Path, job_name: str, hold: bool, dry_run: bool) -> list[str]:
    argv = [
        sys.executable,
        "launch.py",
        "-m",
        "hydra/launcher=slurm",
        f"trainer.optim.lr={','.join(values)}",
        f"hydra.sweep.dir={sweep_dir}",
        f"hydra.launcher.name={job_name}",
    ]
    if hold:
        argv.append("++hydra.launcher.additional_parameters.begin=now+1hour")
    return argv + (["launcher.dry_run=true"] if dry_run else [])


def lr_values(points: int) -> list[str]:
    return [f"{1e-5 * (i + 1):.6g}" for i in range(points)]


def timed_exit(argv: list[str], log: Path) -> float:
    process, _ = run_stamped(argv, log, timeout_s=600)
    if process.exit_code != 0:
        tail = "\n    ".join(line for _, line in process.lines[-10:])
        raise SystemExit(f"{argv[2:4]} failed (exit {process.exit_code}):\n    {tail}")
    return process.duration_s


def queued(job_name: str) -> int:
    """Array tasks of our sweep now in the queue (each task one line with -r)."""
    out = subprocess.run(["squeue", "-h", "-r", f"--name={job_name}", "-o", "%i"], capture_output=True, text=True)
    return len(out.stdout.split())


def timed_submit(argv: list[str], job_name: str, points: int, log: Path, timeout_s: float = 600) -> dict:
    """Seconds until all `points` tasks are queued; our jobs are cancelled afterwards, whatever happened."""
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv,
            cwd=Path(__file__).resolve().parents[1],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        first = None
        while True:
            n, now = queued(job_name), time.monotonic() - start
            first = now if first is None and n else first
            if n >= points:
                return {"ok": True, "submit_s": now, "first_queued_s": first}
            if proc.poll() is not None or now > timeout_s:
                return {"ok": False, "queued": n, "exit_code": proc.poll()}
            time.sleep(POLL_S)
    finally:
        subprocess.run(["scancel", f"--name={job_name}"], check=False)
        proc.terminate()  # it waits for results that will never come
        proc.wait(timeout=60)
        wait_until_gone(job_name)


def wait_until_gone(job_name: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while queued(job_name) and time.monotonic() < deadline:
        time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--points", type=int, default=100, help="sweep points (values of trainer.optim.lr)")
    parser.add_argument("--no-hold", action="store_true", help="submit without --begin=now+1hour")
    args = parser.parse_args()
    if not shutil.which("squeue"):
        raise SystemExit("no SLURM here: start the local cluster with `bash .ci/slurm up` first")
    out = bench_dir(NAME)
    values, runs = lr_values(args.points), []
    for run in range(args.runs):
        print(f"run {run + 1}/{args.runs}", flush=True)
        name = f"bench-sweep-{os.getpid()}-{run}"  # unique: we cancel by it, never anyone else's jobs
        hold = not args.no_hold
        one = timed_exit(sweep_command(values[:1], out / f"one-{run}", name, hold, True), out / f"one-{run}.log")
        validate = timed_exit(sweep_command(values, out / f"dry-{run}", name, hold, True), out / f"dry-{run}.log")
        submit = timed_submit(
            sweep_command(values, out / f"submit-{run}", name, hold, False),
            name,
            args.points,
            out / f"submit-{run}.log",
        )
        runs.append({"one_point_dry_s": one, "validate_s": validate, **submit})
        print(f"  one point {one:.1f} s, validate {validate:.1f} s, submit {submit}", flush=True)
    report(args, runs, out)


def report(args, runs: list[dict], out: Path) -> None:
    keys = ["one_point_dry_s", "validate_s", "first_queued_s", "submit_s"]
    med = {k: median(r.get(k) for r in runs) for k in keys}
    per_point = (med["validate_s"] - med["one_point_dry_s"]) / max(args.points - 1, 1)
    print_table(
        f"sweep submission ({args.points} points): medians of {args.runs} run(s), seconds",
        [
            "1-point dry run",
            f"{args.points}-point validate only",
            "first task queued",
            f"all {args.points} queued",
            "validation per extra point",
        ],
        [[med[k] for k in keys] + [per_point]],
    )
    finish(
        NAME,
        {
            "runs": args.runs,
            "points": args.points,
            "hold": not args.no_hold,
            "median": med,
            "validate_per_extra_point_s": per_point,
            "per_run": runs,
            "run_dir": str(out),
        },
        args.smoke,
    )


if __name__ == "__main__":
    main()
