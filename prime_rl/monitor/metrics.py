"""Reading metrics.jsonl and summarising a run into summary.json."""

import json
from pathlib import Path


def read_metrics(path: Path) -> list[dict]:
    """Every complete line of metrics.jsonl (a torn last line from a killed writer is skipped)."""
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def summarize(rows: list[dict]) -> dict:
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval/reward" in r]
    summary = {"steps": len(train)}
    if evals:
        summary.update(
            {
                "eval/reward_first": evals[0]["eval/reward"],
                "eval/reward_final": evals[-1]["eval/reward"],
                "eval/step_first": evals[0]["step"],
                "eval/step_final": evals[-1]["step"],
            }
        )
    teacher = [r["eval/teacher_reward"] for r in rows if "eval/teacher_reward" in r]
    if teacher:
        summary["eval/teacher_reward"] = teacher[0]
    for key in ("reward/mean", "teacher_kl"):
        series = [r[key] for r in train if key in r]
        if series:
            tail = series[-max(1, len(series) // 10) :]  # the last tenth: one noisy step is no final value
            summary.update({f"{key}/first": series[0], f"{key}/final": sum(tail) / len(tail)})
    if train:
        summary["train_time_s"] = sum(r.get("time/step", 0.0) for r in train)
        summary["loss/final"] = train[-1]["loss"]
    return summary


def write_summary(run_dir: Path) -> dict:
    summary = summarize(read_metrics(run_dir / "metrics.jsonl"))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
