"""Monitoring: summary.json (metrics.py; metrics.jsonl itself is protocol/metrics.py), the job's W&B run
(wandb_run.py), PNG plots (plots.py)."""
