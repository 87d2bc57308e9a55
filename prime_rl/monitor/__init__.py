"""Metrics: metrics.jsonl (written by the trainer), summary.json at the end."""
