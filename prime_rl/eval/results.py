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
        table.columns[:0] = model_columns(harness)
        for row in harness:
            metrics = "  ".join(
                f"{k.removeprefix('lm-eval/')} {v:.3f}" for k, v in row.items() if k.startswith("lm-eval/")
            )
            table.add_row(*model_cells(row), row["task"].removeprefix("lm-eval/"), metrics, f"{row['time_s']:.1f}")
        console.print(table)


def model_columns(rows: list[dict]) -> list[Column]:
    """The model (a model dir's whole path), after the point it belongs to where the rows are several points'."""
    point = [Column("point", overflow="fold")] if "point" in rows[0] else []
    return [*point, Column("model", overflow="fold")]


def model_cells(row: dict) -> list[str]:
    return [row["point"], row["model"]] if "point" in row else [row["model"]]


def task_table(rows: list[dict]) -> Table:
    k = max(j for row in rows for j in passes(row, "eval"))  # points of a sweep may sample different k
    rates = ["pass@1"] + ([f"pass@{k}"] if k > 1 else [])
    table = Table("task", "reward", "± stderr", *rates, "tokens", "time (s)")
    table.columns[:0] = model_columns(rows)
    blank = [""] * len(model_cells(rows[0]))
    for row in rows:
        for name, prefix in [(row["task"], "eval")] + [(f"  {s}", f"eval/{s}") for s in sources(row)]:
            table.add_row(
                *(model_cells(row) if prefix == "eval" else blank),
                name,
                *(cell(row, f"{prefix}/{key}") for key in ["reward", "reward_stderr", *rates]),
                f"{row[f'{prefix}/completion_tokens']:.1f}",
                f"{row['time_s']:.1f}" if prefix == "eval" else "",
            )
    return table


def cell(row: dict, key: str) -> str:
    return f"{row[key]:.3f}" if key in row else "–"  # pass@k of a point that sampled fewer


def passes(row: dict, prefix: str) -> list[int]:
    return [int(key.rsplit("@", 1)[1]) for key in row if key.startswith(f"{prefix}/pass@")]


def sources(row: dict) -> list[str]:
    """A mix's source labels, from its per-source rewards (eval/<label>/reward; eval/env/… are an episode's)."""
    labels = [key.split("/")[1] for key in row if key.count("/") == 2 and key.endswith("/reward")]
    return [label for label in labels if label != "env"]
