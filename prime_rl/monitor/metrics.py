"""A run summarised into summary.json: first and final values of the curves people compare."""

import json

from prime_rl.protocol.atomic import write_text
from prime_rl.protocol.metrics import read_rows
from prime_rl.protocol.run_dir import RunDir


def summarize(rows: list[dict]) -> dict:
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval/reward" in r]
    summary = {"steps": len(train)}
    if evals:
        first, final = evals[0], evals[-1]
        summary |= {"eval/reward_first": first["eval/reward"], "eval/reward_final": final["eval/reward"]}
        summary |= {"eval/step_first": first["step"], "eval/step_final": final["step"]}
    for key in labelled_eval_rewards(rows):  # each eval task's and each source's last eval
        summary[f"{key}_final"] = [r[key] for r in rows if key in r][-1]
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
        # the teacher's requests, tokens and cost over the run (teacher/usage.py)
        summary.update({k: v for k, v in train[-1].items() if k.startswith("teacher/") and k.endswith("_total")})
    return summary


def labelled_eval_rewards(rows: list[dict]) -> list[str]:
    """The eval/<label>/reward keys the rows hold, first seen first: each of orchestrator.eval.tasks, each source of a
    mix (eval/env/… are the episodes' own metrics)."""
    keys = dict.fromkeys(k for r in rows for k in r if k.count("/") == 2 and k.startswith("eval/"))
    return [k for k in keys if k.endswith("/reward") and not k.startswith("eval/env/")]


def write_summary(run_dir: RunDir) -> dict:
    summary = summarize(read_rows(run_dir.metrics))
    write_text(run_dir.summary, json.dumps(summary, indent=2) + "\n")
    return summary
