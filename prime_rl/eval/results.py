"""An evaluation's results: every metric of every model on every task in `results.json`, and the table printed (a
mix's sources as rows of their own under it)."""

import json
from pathlib import Path

from rich.console import Console
from rich.table import Column, Table

RESULTS_FILE = "results.json"


def write_results(out: Path, request: dict, rows: list[dict]) -> Path:
    path = out / RESULTS_FILE
    path.write_text(json.dumps({"request": request, "results": rows}, indent=1))
    return path


def show_results(console: Console, rows: list[dict]) -> None:
    """The table of the project's own tasks, then lm-eval's (its metrics differ from task to task)."""
    ours = [r for r in rows if "eval/reward" in r]
    harness = [r for r in rows if "eval/reward" not in r]
    if ours:
        console.print(task_table(ours))
    if harness:
        table = Table("task", "metrics", "time (s)", title="lm-eval")
        table.columns.insert(0, Column("model", overflow="fold"))
        for row in harness:
            metrics = "  ".join(
                f"{k.removeprefix('lm-eval/')} {v:.3f}" for k, v in row.items() if k.startswith("lm-eval/")
            )
            table.add_row(row["model"], row["task"].removeprefix("lm-eval/"), metrics, f"{row['time_s']:.1f}")
        console.print(table)


def task_table(rows: list[dict]) -> Table:
    k = max(passes(rows[0], "eval"))  # the same k for every row: one sampling config
    rates = ["pass@1"] + ([f"pass@{k}"] if k > 1 else [])
    table = Table("task", "reward", "± stderr", *rates, "tokens", "time (s)")
    table.columns.insert(0, Column("model", overflow="fold"))  # a model dir's whole path
    for row in rows:
        for name, prefix in [(row["task"], "eval")] + [(f"  {s}", f"eval/{s}") for s in sources(row)]:
            table.add_row(
                row["model"] if prefix == "eval" else "",
                name,
                *(f"{row[f'{prefix}/{key}']:.3f}" for key in ["reward", "reward_stderr", *rates]),
                f"{row[f'{prefix}/completion_tokens']:.1f}",
                f"{row['time_s']:.1f}" if prefix == "eval" else "",
            )
    return table


def passes(row: dict, prefix: str) -> list[int]:
    return [int(key.rsplit("@", 1)[1]) for key in row if key.startswith(f"{prefix}/pass@")]


def sources(row: dict) -> list[str]:
    """A mix's source labels, from its per-source rewards (eval/<label>/reward; eval/env/… are an episode's)."""
    labels = [key.split("/")[1] for key in row if key.count("/") == 2 and key.endswith("/reward")]
    return [label for label in labels if label != "env"]
