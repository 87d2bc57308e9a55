"""Monitoring: metrics.jsonl and summary.json (metrics.py), the job's W&B run (wandb_run.py), PNG plots (plots.py)."""
