"""What every benchmark script shares: the composed config, running `launch.py` (or any command) while
time-stamping what it prints and what it appends to metrics.jsonl, medians, a table on the terminal, and one
JSON line per benchmark invocation in bench/results/<name>.jsonl.

Times are seconds since the benchmark started the command (time.monotonic in this process), so both sides of
a comparison are measured by the same clock, from the same moment, including their own start-up.
"""

import json
import math
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from prime_rl.protocol.metrics import MetricsTail

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
RUNS = REPO / "outputs" / "bench"  # run dirs of the benchmark's launches (outputs/ is ignored by git)
POLL_S = 0.1  # how often metrics.jsonl is read: the resolution of every time stamped from it
STOP_GRACE_S = 60.0  # the launcher stops its own children on SIGTERM; give it time before SIGKILL

if str(REPO) not in sys.path:  # the scripts run as `python bench/x.py`: make prime_rl and tests importable
    sys.path.insert(0, str(REPO))


def compose(overrides: Sequence[str] = ()):
    """The typed Config a `python launch.py <overrides>` run would get (Hydra's own composition)."""
    from prime_rl.config import compose_config

    return compose_config(overrides)


# ---------------------------------------------------------------- running commands and reading their output


@dataclass
class Stamped:
    """A finished (or stopped) command: its exit code and every line it printed, each with its arrival time."""

    exit_code: int | None
    lines: list[tuple[float, str]]  # (seconds since start, line) of stdout and stderr together
    duration_s: float
    timed_out: bool = False

    def first(self, pattern: str) -> tuple[float, "re.Match"] | None:
        """The arrival time and match of the first printed line matching `pattern`."""
        for t, line in self.lines:
            m = re.search(pattern, line)
            if m:
                return t, m
        return None

    def json_lines(self) -> list[tuple[float, dict]]:
        """Lines that are JSON objects (the TRL child reports its events this way)."""
        rows = []
        for t, line in self.lines:
            if line.startswith("{"):
                try:
                    rows.append((t, json.loads(line)))
                except ValueError:
                    pass
        return rows


@dataclass
class Launch:
    """One `python launch.py` run: its printed lines and its metrics.jsonl rows, each with its arrival time."""

    run_dir: Path
    process: Stamped
    rows: list[tuple[float, dict]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.process.exit_code == 0

    def train_rows(self) -> list[tuple[float, dict]]:
        return [(t, r) for t, r in self.rows if "loss" in r]  # the trainer's step rows

    def eval_rows(self) -> list[tuple[float, dict]]:
        return [(t, r) for t, r in self.rows if "eval/reward" in r]

    def summary(self) -> dict:
        path = self.run_dir / "summary.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def server_ready_s(self) -> float | None:
        """The launcher's own measure of the vLLM servers' start: 'inference ready after X s' (the slowest
        server when there are several; they start in parallel)."""
        found = [
            float(m.group(1))
            for _, line in self.process.lines
            for m in [re.search(r"\bready after ([\d.]+) s", line)]
            if m
        ]
        return max(found) if found else None


def stamped(rows: list[dict], now: float) -> list[tuple[float, dict]]:
    return [(now, row) for row in rows]


def run_stamped(
    argv: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    timeout_s: float = 3600,
    metrics: MetricsTail | None = None,
    stop_when=None,
) -> tuple[Stamped, list[tuple[float, dict]]]:
    """Run a command in its own session, time-stamping its output lines (also written to `log`) and, if given,
    the rows appended to a metrics file. `stop_when(rows)` returning true stops it early (SIGTERM).
    The command is stopped on timeout or on Ctrl-C of the benchmark, never left running."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=_read_lines, args=(proc, start, lines, log), daemon=True)
    reader.start()
    rows: list[tuple[float, dict]] = []
    timed_out = False
    try:
        while proc.poll() is None:
            if metrics:
                rows += stamped(metrics.poll(), time.monotonic() - start)
            if stop_when and stop_when(rows):
                break
            if time.monotonic() - start > timeout_s:
                timed_out = True
                break
            time.sleep(POLL_S)
    finally:
        stop(proc)
    reader.join(timeout=10)
    if metrics:
        rows += stamped(metrics.poll(), time.monotonic() - start)
    return Stamped(proc.returncode, lines, time.monotonic() - start, timed_out), rows


def _read_lines(proc: subprocess.Popen, start: float, lines: list, log: Path) -> None:
    with log.open("w") as out:
        for line in proc.stdout:
            lines.append((time.monotonic() - start, line.rstrip("\n")))
            out.write(f"{lines[-1][0]:9.2f} {line}")
            out.flush()


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the command (the launcher then stops every process group it started), SIGKILL its group late."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_launcher(
    overrides: Sequence[str],
    run_dir: Path,
    timeout_s: float = 3600,
    stop_when=None,
    env: dict[str, str] | None = None,
) -> Launch:
    """`python launch.py <overrides>` into `run_dir` (with `env` added to the environment every process it starts
    inherits), with its metrics rows time-stamped as they appear."""
    argv = [sys.executable, "launch.py", *overrides, f"hydra.run.dir={run_dir}"]
    print(f"  $ {shlex.join(argv[1:])}", flush=True)
    # A wide virtual terminal: rich wraps the launcher's lines at 80 columns when it is not writing to a tty.
    process, rows = run_stamped(
        argv,
        run_dir.parent / f"{run_dir.name}.console.log",
        env={"COLUMNS": "250", **(env or {})},
        timeout_s=timeout_s,
        metrics=MetricsTail(run_dir / "metrics.jsonl"),
        stop_when=stop_when,
    )
    launch = Launch(run_dir, process, rows)
    if not launch.ok and not stop_when:
        tail = "\n    ".join(line for _, line in process.lines[-15:])
        print(f"  run failed (exit {process.exit_code}); last lines:\n    {tail}", flush=True)
    return launch


def bench_dir(name: str) -> Path:
    """A fresh folder for one benchmark invocation's run dirs."""
    path = RUNS / name / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    path.mkdir(parents=True, exist_ok=True)
    return path


# ---------------------------------------------------------------- fixed-length runs compared by variant


def fixed_steps(steps: int, seed: int) -> list[str]:
    """Overrides of a run of exactly `steps` optimizer steps that evaluates at its end, without W&B."""
    return [f"max_steps={steps}", f"orchestrator.eval.interval={steps}", "monitor=off", f"seed={seed}"]


def run_outcome(launch: Launch) -> dict:
    """What every variant comparison reads off a finished run: its pace and its eval rewards."""
    stamps = [t for t, _ in launch.train_rows()]
    evals = [r for _, r in launch.eval_rows()]
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else None
    return {
        "ok": launch.ok,
        "wall_s": launch.process.duration_s,
        "steps_per_min": 60 * (len(stamps) - 1) / span if span else None,
        "eval_first": evals[0]["eval/reward"] if evals else None,
        "eval_last": evals[-1]["eval/reward"] if evals else None,
        "eval_last_stderr": evals[-1].get("eval/reward_stderr") if evals else None,
    }


def steady_rows(launch: Launch) -> list[dict]:
    """The train rows from step 1: step 0 also waits for the orchestrator's start-up."""
    return [r for _, r in launch.train_rows() if r["step"] >= 1]


def compare_variants(runs: int, variants: Sequence[str], run_one: Callable[[str, int], dict]) -> tuple[list, dict]:
    """Every variant once per seed, seeds outermost (so a slow drift of the machine hits every variant alike);
    returns the per-run records and each variant's medians over seeds."""
    per_run = []
    for seed in range(runs):
        print(f"run {seed + 1}/{runs}", flush=True)
        per_run.append({v: run_one(v, seed) for v in variants})
    first = per_run[0][variants[0]]
    keys = [k for k, value in first.items() if k != "ok" and not isinstance(value, list)]  # lists: curves
    return per_run, {v: {k: median(r[v][k] for r in per_run) for k in keys} for v in variants}


# ---------------------------------------------------------------- runs held to 90 % of the teacher (opd)

Rows = list[tuple[float, dict]]


def teacher_reward(rows: Rows) -> float | None:
    """The teacher's eval reward an opd run measures at step 0 (same eval prompts, same sampling)."""
    return next((r["eval/teacher_reward"] for _, r in rows if "eval/teacher_reward" in r), None)


def reached(rows: Rows, target: float | None) -> tuple[float, int] | None:
    """(arrival time, step) of the first eval row at or above the target."""
    if target is None:
        return None
    return next(((t, r["step"]) for t, r in rows if r.get("eval/reward", -1.0) >= target), None)


def add_target_args(parser, eval_interval: int = 5, timeout: float = 1800) -> None:
    """The arguments of runs held to a fraction of their teacher's eval reward."""
    parser.add_argument(
        "--eval-interval", type=int, default=eval_interval, help="evaluate every N steps (the step resolution)"
    )
    parser.add_argument("--fraction", type=float, default=0.9, help="target = this x the teacher's eval reward")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds per run")


def run_to_target(overrides: list[str], run_dir: Path, timeout_s: float, target_of: Callable) -> tuple[Launch, dict]:
    """A launch stopped at its first eval at or above `target_of(rows)`, and what it reached: whether it ran, its
    teacher's level, the target's step and second, its last eval, its eval curve."""
    launch = run_launcher(
        overrides, run_dir, timeout_s=timeout_s, stop_when=lambda rows: reached(rows, target_of(rows)) is not None
    )
    hit = reached(launch.rows, target_of(launch.rows))
    evals = launch.eval_rows()
    return launch, {
        "ok": launch.ok or hit is not None,
        "teacher_reward": teacher_reward(launch.rows),
        "target_step": hit[1] if hit else None,
        "target_s": hit[0] if hit else None,
        "eval_last": evals[-1][1]["eval/reward"] if evals else None,
        "curve": [(r["step"], r["eval/reward"]) for _, r in evals],
    }


def steps_to_target(run: dict) -> float:
    """A run that never reached the target took more steps than its budget: inf, so medians stay honest."""
    return run["target_step"] if run["target_step"] is not None else math.inf


def shown(steps: float, budget: int) -> str:
    return f"> {budget}" if steps == math.inf else f"{steps:g}"


# ---------------------------------------------------------------- numbers, tables and the results file


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that exist (None = not measured, e.g. a target never reached)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


# where a step's time goes, from our trainer's metrics.jsonl rows: key -> column header (time/handoff: the device
# idle between two turns of a colocated step; absent in the separate layout)
STEP_TIMES = {
    "time/step": "step",
    "time/generate": "generate",
    "time/train": "train",
    "time/reload": "reload",
    "time/export": "export",
    "time/score": "score",
    "time/handoff": "handoff",
    "throughput/generate_tokens_per_s": "gen tok/s",
}


def step_times(rows: list[dict]) -> dict:
    """Medians over a run's train rows of each STEP_TIMES key (None where no row has it)."""
    return {key: median(r.get(key) for r in rows) for key in STEP_TIMES}


def fmt(value, spec: str = "{:.3g}") -> str:
    if value is None:
        return "—"
    if isinstance(value, (int, float)) and abs(value) >= 1000:
        return f"{value:,.0f}"  # 3,250 rather than 3.25e+03
    return spec.format(value) if isinstance(value, (int, float)) else str(value)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for h in headers:
        table.add_column(h, justify="right")
    for row in rows:
        table.add_row(*(fmt(v) if not isinstance(v, str) else v for v in row))
    Console(width=160).print(table)


def reproduce_command() -> str:
    """The exact command line of this invocation, runnable from the repo root."""
    exe = Path(sys.executable)
    try:
        exe = exe.relative_to(REPO)
    except ValueError:
        pass
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(REPO)
    except ValueError:
        pass
    return shlex.join([str(exe), str(script), *sys.argv[1:]])


def machine() -> dict:
    """Where and under what load it ran: numbers from a busy machine say so themselves."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
    )
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "commit": commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else ""),
    }


def save_result(name: str, record: dict, smoke: bool) -> Path:
    """Append one JSON line to bench/results/<name>.jsonl (smoke runs go to <name>.smoke.jsonl, so they can
    never be mistaken for results)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}{'.smoke' if smoke else ''}.jsonl"
    line = {
        "time": datetime.now().isoformat(timespec="seconds"),
        "command": reproduce_command(),
        "machine_at_start": MACHINE_AT_START,
        "machine_at_end": machine(),
        **record,
    }
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")
    return path


def finish(name: str, record: dict, smoke: bool) -> None:
    path = save_result(name, record, smoke)
    print(f"\nappended to {path.relative_to(REPO)}")
    print(f"reproduce: {reproduce_command()}")


def add_runs_arg(parser, default: int = 3) -> None:
    parser.add_argument("--runs", type=int, default=default, help="repetitions; the tables show medians")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the script works: results go to <name>.smoke.jsonl, not the results file",
    )


MACHINE_AT_START = machine()
