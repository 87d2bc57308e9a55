"""`python -m prime_rl.report <multirun dir>`: prints the sweep's table, writes report.csv and report_*.png, and saves
a W&B workspace for the sweep where W&B is online. `python -m prime_rl.report <run dir>`: saves the run's
workspace."""

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from prime_rl.protocol.metrics import metric_text
from prime_rl.report.sweep import write_report
from prime_rl.report.workspace import is_run_dir, publish_workspace


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prime_rl.report", description=__doc__)
    parser.add_argument("sweep_dir", type=Path, help="a Hydra multirun dir (multirun/2026-01-31/12-00-00) or a run dir")
    sweep_dir = parser.parse_args(argv).sweep_dir
    if is_run_dir(sweep_dir):
        print(publish_workspace(sweep_dir))
        return 0
    try:
        (header, *rows), files = write_report(sweep_dir)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table = Table(title=str(sweep_dir))
    for column in header:
        table.add_column(column, justify="left" if column in ("job", "status") else "right", overflow="fold")
    for row in rows:
        table.add_row(*(metric_text(v) for v in row))
    console = Console() if sys.stdout.isatty() else Console(width=1000)  # piped: never cut a value
    console.print(table)
    for path in files:
        console.print(f"wrote {path}", soft_wrap=True, highlight=False)
    console.print(publish_workspace(sweep_dir), soft_wrap=True, highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
