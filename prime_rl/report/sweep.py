"""The sweep report: each job's swept values next to its final metrics, as a table, a CSV and PNGs.

A multirun dir holds one subdir per job; Hydra writes the job's command-line overrides to
`<job>/.hydra/overrides.yaml`, and the run writes metrics.jsonl, (once finished) summary.json, and how its launch
ended (outcome.json).
"""

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from prime_rl.monitor.metrics import summarize
from prime_rl.monitor.plots import is_number, new_plot, plot_noisy, save, series
from prime_rl.protocol.metrics import read_rows
from prime_rl.protocol.run_dir import RunDir

# summary.json keys shown per job, in this order, when any job has them
FINAL_METRICS = ["eval/reward_final", "reward/mean/final", "teacher_kl/final", "loss/final", "steps", "train_time_s"]


@dataclass
class Job:
    dir: Path
    overrides: dict[str, object]  # key -> value, parsed as Hydra parses the command line
    rows: list[dict]  # metrics.jsonl
    summary: dict  # summary.json, or summarised from metrics.jsonl when the job did not finish
    status: str  # done (summary.json: the launcher saw it succeed) | failed (<role>) | stopped (<signal>) | incomplete


def load_jobs(sweep_dir: Path) -> list[Job]:
    dirs = sorted({p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")}, key=job_order)
    return [load_job(d) for d in dirs]


def job_order(path: Path):
    """Numeric job subdirs (Hydra's default `${hydra.job.num}`) in number order, others by name after them."""
    return (0, int(path.name), "") if path.name.isdigit() else (1, 0, path.name)


def load_job(job_dir: Path) -> Job:
    lines = OmegaConf.to_container(OmegaConf.load(job_dir / ".hydra" / "overrides.yaml"))
    overrides = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(lines)}
    rows = read_rows(RunDir(job_dir).metrics)
    summary_file = job_dir / "summary.json"
    finished = summary_file.exists()
    summary = json.loads(summary_file.read_text()) if finished else summarize(rows)
    return Job(job_dir, overrides, rows, summary, "done" if finished else unfinished(RunDir(job_dir)))


def unfinished(run_dir: RunDir) -> str:
    """How a job without a summary ended, as its launcher recorded it; incomplete: running, or killed outright."""
    outcome = run_dir.read_outcome()
    if not outcome:
        return "incomplete"
    if outcome["status"] == "failed":
        return f"failed ({outcome['role']})"
    return f"stopped ({outcome['signal']})" if outcome["status"] == "stopped" else "incomplete"


def swept_keys(jobs: list[Job]) -> list[str]:
    """Override keys whose value differs between jobs; all of them when nothing differs (a single job)."""
    keys = list(dict.fromkeys(k for job in jobs for k in job.overrides))
    differ = [k for k in keys if len({repr(job.overrides.get(k)) for job in jobs}) > 1]
    return differ or keys


def report_table(jobs: list[Job], swept: list[str]) -> list[list[object]]:
    """Header row then one row per job: job, status, swept values, final metrics."""
    metrics = [m for m in FINAL_METRICS if any(m in job.summary for job in jobs)]
    rows = [["job", "status", *swept, *metrics]]
    for job in jobs:
        values = [job.overrides.get(k) for k in swept] + [job.summary.get(m) for m in metrics]
        rows.append([job.dir.name, job.status, *values])
    return rows


def plot_final_vs(jobs: list[Job], key: str, swept: list[str], metric: str, path: Path) -> Path:
    """The final metric against one swept value; jobs equal in the other swept values share a line."""
    fig, ax = new_plot(f"{metric} vs {key}", metric, xlabel=key)
    others = [k for k in swept if k != key]
    lines: dict[str, list] = {}
    for job in jobs:
        if is_number(job.summary.get(metric)):
            label = label_of(job, others)
            lines.setdefault(label, []).append((job.overrides.get(key), job.summary[metric]))
    numeric = all(is_number(x) for points in lines.values() for x, _ in points)
    for label, points in lines.items():
        points = sorted(points, key=lambda p: p[0]) if numeric else points
        ax.plot([x if numeric else str(x) for x, _ in points], [y for _, y in points], "o-", label=label or None)
    xs = [x for points in lines.values() for x, _ in points]
    if numeric and xs and min(xs) > 0 and max(xs) / min(xs) >= 10:  # lr / tau sweeps span decades
        ax.set_xscale("log")
    return save(fig, ax, path)


def plot_reward_curves(jobs: list[Job], swept: list[str], path: Path) -> Path:
    """Every job's training reward (smoothed) and eval reward (dashed, same colour) on one axis."""
    fig, ax = new_plot("reward of every job (solid: reward/mean, dashed: eval/reward)", "reward")
    for job in jobs:
        label, colour = label_of(job, swept) or job.dir.name, None
        xs, ys = series(job.rows, "reward/mean")
        if xs:
            plot_noisy(ax, xs, ys, label)
            colour, label = ax.lines[-1].get_color(), None  # one legend entry per job
        xs, ys = series(job.rows, "eval/reward")
        if xs:
            ax.plot(xs, ys, "o--", color=colour, label=label)
    return save(fig, ax, path)


def label_of(job: Job, keys: list[str]) -> str:
    """The job's values of `keys` it sets, each named by its last part when that is unambiguous (lr=0.003)."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    names = [short if last.count(short) == 1 else k for k, short in zip(keys, last)]
    return ", ".join(f"{name}={job.overrides[k]}" for k, name in zip(keys, names) if k in job.overrides)


def plot_name(key: str) -> str:
    return key.replace("/", "_").replace(".", "_")


def write_report(sweep_dir: Path) -> tuple[list[list[object]], list[Path]]:
    """Writes report.csv and report_*.png into the sweep dir; returns the table and the files written."""
    jobs = load_jobs(sweep_dir)
    if not jobs:
        raise FileNotFoundError(f"no job dirs with .hydra/overrides.yaml under {sweep_dir}")
    swept = swept_keys(jobs)
    table = report_table(jobs, swept)
    with (sweep_dir / "report.csv").open("w", newline="") as f:
        csv.writer(f).writerows(table)
    evaluated = any("eval/reward_final" in job.summary for job in jobs)
    metric = "eval/reward_final" if evaluated else "reward/mean/final"
    files = [sweep_dir / "report.csv"]
    files += [
        plot_final_vs(jobs, k, swept, metric, sweep_dir / f"report_{plot_name(metric)}_vs_{plot_name(k)}.png")
        for k in swept
    ]
    files.append(plot_reward_curves(jobs, swept, sweep_dir / "report_reward_curves.png"))
    return table, files
