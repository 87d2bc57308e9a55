"""`python -m prime_rl.report <multirun dir>`: swept values vs final metrics (table, CSV, PNGs)."""

from prime_rl.report.sweep import load_jobs, swept_keys, write_report

__all__ = ["load_jobs", "swept_keys", "write_report"]
