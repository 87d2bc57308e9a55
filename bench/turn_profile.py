"""Does anything busy-wait while the other phase has the device? A CPU profile of the colocated layout: while a
`python launch.py deployment=colocated` run trains, every `--interval-s` this reads which process holds the run's
`device.lock` (the kernel's /proc/locks) and each process's CPU time (/proc/<pid>/stat), and charges each role's
CPU seconds (a server with its engine core, the orchestrator with its reward workers) to the turn it fell in:
the orchestrator's, the trainer's, or nobody's (the hand-off between them).

A process that spins while waiting shows as CPU during the other's turn close to a core per spinning thread; one
that sleeps shows only its stray work (the orchestrator's HTTP keep-alives, a log line).

    .venv/bin/python bench/turn_profile.py                 # ~1.5 min: the default run's 80 steps
    .venv/bin/python bench/turn_profile.py --steps 10 --smoke
"""

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from common import REPO, add_runs_arg, bench_dir, finish, print_table

NAME = "turn_profile"
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
ROLES = {
    "vllm.entrypoints": "inference",
    "EngineCore": "inference",
    "prime_rl.orchestrator": "orchestrator",
    "prime_rl.trainer": "trainer",
}


def parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def role_of(pid: int, launcher: int) -> str | None:
    """The role of a process of the run (a descendant of the launcher), or of its nearest ancestor with one:
    the engine core is the inference server's child, the reward workers the orchestrator's."""
    chain, at = [], pid
    while at and at != launcher:
        chain.append(at)
        at = parent(at)
    if at != launcher:
        return None
    for member in chain:
        try:
            cmdline = Path(f"/proc/{member}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return None
        role = next((role for key, role in ROLES.items() if key in cmdline), None)
        if role:
            return role
    return None


def cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # it has exited
        return None
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime + stime


def lock_holder(inode: int) -> int | None:
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if "FLOCK" in parts and "->" not in parts and parts[-3].endswith(f":{inode}"):  # "->": a waiter
            return int(parts[-4])
    return None


def profile(args, run_dir: Path) -> dict:
    argv = [
        sys.executable,
        "launch.py",
        "deployment=colocated",
        f"max_steps={args.steps}",
        "monitor=off",
        "orchestrator.eval.interval=0",
        f"hydra.run.dir={run_dir}",
    ]
    launcher = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = run_dir / "device.lock"
    charged = defaultdict(float)  # (role, whose turn) -> CPU seconds
    wall = defaultdict(float)  # whose turn -> seconds
    last: dict[int, float] = {}
    roles: dict[int, str] = {}
    started, before = False, time.monotonic()
    while launcher.poll() is None:
        time.sleep(args.interval_s)
        now_s, elapsed = time.monotonic(), time.monotonic() - before
        before = now_s
        if not lock.exists():
            continue
        holder = lock_holder(os.stat(lock).st_ino)
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            if pid not in roles and (role := role_of(pid, launcher.pid)):
                roles[pid] = role
        turn = roles.get(holder, "nobody") if holder else "nobody"
        started = started or turn != "nobody"
        for pid, role in roles.items():
            now = cpu_s(pid)
            if now is None:
                continue
            if started and pid in last:
                charged[role, turn] += now - last[pid]
            last[pid] = now
        if started:
            wall[turn] += elapsed  # the turn seen now is charged with the time since the last look
    return {
        "exit_code": launcher.returncode,
        "wall_s": dict(wall),
        "cpu_s": {f"{role} in {turn}'s turn": s for (role, turn), s in sorted(charged.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser, default=1)
    parser.add_argument("--steps", type=int, default=80, help="steps of the colocated default run")
    parser.add_argument("--interval-s", type=float, default=0.01, help="sampling interval")
    args = parser.parse_args()
    out = bench_dir(NAME)
    result = profile(args, out / "run")
    wall = result["wall_s"]
    rows = []
    for role in ("inference", "orchestrator", "trainer"):
        row = [role]
        for turn in ("orchestrator", "trainer", "nobody"):
            seconds = result["cpu_s"].get(f"{role} in {turn}'s turn", 0.0)
            row.append(f"{seconds:.2f} s = {seconds / wall[turn]:.2f} cores" if wall.get(turn) else "—")
        rows.append(row)
    print_table(
        f"CPU used during each turn (exit {result['exit_code']}; turns: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in wall.items())
        + ")",
        ["process", "orchestrator's turn", "trainer's turn", "nobody's (hand-off)"],
        rows,
    )
    finish(NAME, {"steps": args.steps, "interval_s": args.interval_s, "run_dir": str(out), **result}, args.smoke)


if __name__ == "__main__":
    main()
