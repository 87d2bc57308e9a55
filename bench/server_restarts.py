"""What a server's death costs a run now that it is restarted in place: the default run (rl on the built-in task,
colocated on the CPU) as it is, and with the student's vLLM server killed (`kill -9` of its process group) every
50 steps. Each run evaluates at its last step; the eval's standard error says whether the killed run learnt as
much. The cost of a restart is the killed run's extra wall-clock over the clean one's, per kill; the launcher's own
line says how long the server took to serve again.

    .venv/bin/python bench/server_restarts.py --runs 3       # full: ~15 min on the 2-core machine
    .venv/bin/python bench/server_restarts.py --runs 1 --steps 60 --smoke
"""

import argparse
import os
import re
import signal

from common import (
    add_runs_arg,
    bench_dir,
    compare_variants,
    finish,
    fixed_steps,
    print_table,
    run_launcher,
    run_outcome,
)

NAME = "server_restarts"
EVERY = 50  # steps between kills
SERVES_AGAIN = re.compile(r"inference serves again after ([\d.]+) s")


class Killer:
    """Kills the student's server each time the run has trained EVERY more steps (a run's stop_when: never stops)."""

    def __init__(self, run_dir):
        self.run_dir, self.kills = run_dir, 0

    def __call__(self, rows) -> bool:
        trained = sum("loss" in r for _, r in rows)
        if trained >= EVERY * (self.kills + 1):
            log = (self.run_dir / "logs" / "launcher.log").read_text()
            os.killpg(int(re.findall(r"started inference \(pid (\d+)", log)[-1]), signal.SIGKILL)
            self.kills += 1
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=200, help="steps per run (evaluated at the last)")
    args = parser.parse_args()
    out = bench_dir(NAME)

    def run_one(variant: str, seed: int) -> dict:
        print(f"  {variant}", flush=True)
        run_dir = out / f"{variant.split()[0]}-{seed}"
        killer = Killer(run_dir) if variant != "clean" else None
        launch = run_launcher([*fixed_steps(args.steps, seed), "ckpt.interval=0"], run_dir, stop_when=killer)
        serves = [float(m.group(1)) for _, line in launch.process.lines for m in [SERVES_AGAIN.search(line)] if m]
        rows = [r for _, r in launch.train_rows()]
        return {
            **run_outcome(launch),
            "kills": killer.kills if killer else 0,
            "restarts": max((r.get("restarts/inference", 0) for r in rows), default=0),
            "serves_again_s": max(serves) if serves else None,
            "steps": len(rows),
        }

    variants = ["clean", f"killed every {EVERY} steps"]
    per_run, med = compare_variants(args.runs, variants, run_one)
    clean, killed = med[variants[0]], med[variants[1]]
    per_kill = (killed["wall_s"] - clean["wall_s"]) / killed["kills"] if killed["kills"] else None
    print_table(
        f"the student's server killed every {EVERY} steps: medians of {args.runs} run(s) of {args.steps} steps",
        ["variant", "wall s", "steps", "kills", "restarts", "serves again s", "eval", "± SE", "s per kill"],
        [
            [v, med[v]["wall_s"], med[v]["steps"], med[v]["kills"], med[v]["restarts"], med[v]["serves_again_s"]]
            + [med[v]["eval_last"], med[v]["eval_last_stderr"], per_kill if v != "clean" else None]
            for v in variants
        ],
    )
    record = {"steps": args.steps, "every": EVERY, "runs": args.runs, "median": med, "per_run": per_run}
    finish(NAME, record | {"seconds_per_kill": per_kill}, args.smoke)


if __name__ == "__main__":
    main()
