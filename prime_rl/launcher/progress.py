"""The launcher's view of a run's progress: follow metrics.jsonl, show one live line, summarise at the end."""

import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from prime_rl.protocol.metrics import MetricsTail, metric_text
from prime_rl.protocol.run_dir import RunDir


class RunState:
    """What the launcher knows of the run from metrics.jsonl: the latest value of each key (the trainer and the
    orchestrator write different keys), the furthest step, and each step's time."""

    def __init__(self, path: Path):
        self.tail = MetricsTail(path)
        self.latest: dict[str, object] = {}
        self.last_record: dict | None = None
        self.step_times: dict[int, float] = {}  # step -> time/step, each step counted once

    def poll(self) -> None:
        for record in self.tail.poll():
            self.last_record = record
            step, step_time, highest = record.get("step"), record.get("time/step"), self.step
            self.latest.update(record)
            if isinstance(step, int):
                # The orchestrator may log a step ahead of the trainer; show the furthest one.
                self.latest["step"] = max(step, highest)
                if isinstance(step_time, (int, float)):
                    self.step_times.setdefault(step, float(step_time))

    @property
    def step(self) -> int:
        step = self.latest.get("step")
        return step if isinstance(step, int) else 0

    def eta_s(self, max_steps: int, elapsed_s: float) -> float | None:
        """Remaining time from the mean step time so far (the trainer's time/step, else wall clock)."""
        if self.step_times:
            per_step = sum(self.step_times.values()) / len(self.step_times)
        elif self.step > 0:
            per_step = elapsed_s / self.step
        else:
            return None
        return per_step * max(0, max_steps - self.step)


class ProgressLine:
    """One live line on stderr: step/max_steps, reward, loss, tokens/s, ETA."""

    def __init__(self, console: Console, metrics: RunState, max_steps: int):
        self.metrics = metrics
        self.started = time.monotonic()
        self.progress = Progress(
            TextColumn("step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            console=console,
            refresh_per_second=2,  # the line changes once a step; spare the shared CPUs
        )
        self.task = self.progress.add_task("run", total=max_steps, info="waiting for the first step")
        self.max_steps = max_steps

    def __enter__(self) -> "ProgressLine":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def update(self) -> None:
        self.metrics.poll()
        if self.metrics.last_record is None:
            return
        self.progress.update(self.task, completed=self.metrics.step, info=self.info())

    def info(self) -> str:
        m = self.metrics.latest
        parts = [
            _fmt("reward", m.get("reward/mean"), "{:.3f}"),
            _fmt("eval", m.get("eval/reward"), "{:.3f}"),
            _fmt("loss", m.get("loss"), "{:.4f}"),
            _fmt("tok/s", m.get("throughput/tokens_per_s"), "{:,.0f}"),
        ]
        eta = self.metrics.eta_s(self.max_steps, time.monotonic() - self.started)
        if eta is not None:
            parts.append(f"ETA {format_duration(eta)}")
        return "  ".join(p for p in parts if p)


def _fmt(label: str, value: object, spec: str) -> str:
    return f"{label} {spec.format(value)}" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def summary_lines(run_dir: Path, metrics: RunState) -> list[str]:
    """The final numbers: summary.json's scalar entries if it exists, else the last metrics record."""
    metrics.poll()
    try:
        summary = json.loads(RunDir(run_dir).summary.read_text())
        source = "summary.json"
    except (OSError, ValueError):
        summary, source = metrics.last_record, "metrics.jsonl (last line)"
    if not isinstance(summary, dict):
        return ["no metrics were written"]
    scalars = {k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))}
    return [f"summary ({source}):"] + [f"  {k}: {metric_text(v)}" for k, v in scalars.items()]
