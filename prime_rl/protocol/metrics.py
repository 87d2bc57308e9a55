"""metrics.jsonl: one JSON object per line, each with its `step`.

Writers: the trainer, one line per step (the orchestrator's metrics of that step travel in the batch file and
are merged in), and the orchestrator, one last line (step = max_steps) with the final evaluation. Readers: the
launcher's progress line and summary, the W&B run's final line, the sweep report, resume. A line is appended
whole in one write; a reader skips a torn last line from a killed writer.
"""

import json
from pathlib import Path

from prime_rl.protocol.atomic import write_text


def append_row(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def parse_lines(data: bytes | str) -> list[dict]:
    """The JSON objects among complete lines; anything else (a torn line, stray text) is skipped."""
    rows = []
    for line in data.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_rows(path: Path) -> list[dict]:
    return parse_lines(path.read_bytes()) if path.exists() else []


def keep_rows_before(path: Path, step: int) -> None:
    """Resume: drop the lines of `step` and later, which the resumed run writes again."""
    kept = [row for row in read_rows(path) if isinstance(row.get("step"), int) and row["step"] < step]
    write_text(path, "".join(json.dumps(row) + "\n" for row in kept))


class MetricsTail:
    """Follows metrics.jsonl while it is appended to: each poll returns the rows completed since the last one.
    A line still being written waits for its newline; a file rewritten from scratch (resume) is read anew."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.partial = b""

    def poll(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                if f.seek(0, 2) < self.offset:
                    self.offset, self.partial = 0, b""
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []  # not written yet
        self.offset += len(data)
        complete, _, self.partial = (self.partial + data).rpartition(b"\n")
        return parse_lines(complete)


def metric_text(value: object, none: str = "") -> str:
    """A metric's value as a table or a log line shows it: floats to 4 significant digits, None as `none`."""
    if value is None:
        return none
    return f"{value:.4g}" if isinstance(value, float) else str(value)
