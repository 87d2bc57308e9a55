"""PNG plots of a finished run (`plots/*.png`, readable without W&B), and the drawing helpers the sweep
report shares. matplotlib's Figure is used without pyplot: no GUI backend, no global state between plots."""

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from prime_rl.monitor.metrics import labelled_eval_rewards
from prime_rl.protocol.metrics import read_rows
from prime_rl.protocol.run_dir import RunDir

# plot name -> (y label, per-step metrics drawn raw + smoothed, occasional metrics drawn as points)
RUN_PLOTS = {
    "reward": ("reward", ["reward/mean"], ["eval/reward"]),
    "loss": ("loss", ["loss"], []),
    "teacher_kl": ("log π − log p_teacher", ["teacher_kl"], []),
    "throughput": ("tokens / s", ["throughput/tokens_per_s", "throughput/generate_tokens_per_s"], []),
}


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows holding a finite number under `key`."""
    points = [(r["step"], r[key]) for r in rows if is_number(r.get(key)) and "step" in r]
    return [s for s, _ in points], [v for _, v in points]


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def smooth(values: Sequence[float]) -> list[float]:
    """Trailing mean over a twentieth of the run: per-step values are noisy, their trend is what one reads."""
    window = max(1, len(values) // 20)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def new_plot(title: str, ylabel: str, xlabel: str = "step"):
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def plot_noisy(ax, xs: Sequence, ys: Sequence[float], label: str, color=None) -> None:
    """Raw values faint, their trailing mean on top in the same colour."""
    (raw,) = ax.plot(xs, ys, alpha=0.25, color=color, linewidth=1)
    ax.plot(xs, smooth(ys), color=raw.get_color(), label=label)


def save(fig: Figure, ax, path: Path) -> Path:
    entries = len(ax.get_legend_handles_labels()[0])
    if entries > 4:  # a sweep's many jobs: beside the axes, where it hides no curve
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    elif entries:
        ax.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return path


def write_plots(run_dir: Path) -> list[Path]:
    """One PNG per plot of RUN_PLOTS that has data (teacher_kl only in opd), into <run_dir>/plots/."""
    rows = read_rows(RunDir(run_dir).metrics)
    written = []
    for name, (ylabel, per_step, occasional) in RUN_PLOTS.items():
        if name == "reward":  # each eval task's and each source's evaluations beside the task's own
            occasional = occasional + labelled_eval_rewards(rows)
        drawn = {key: series(rows, key) for key in per_step + occasional}
        if not any(xs for xs, _ in drawn.values()):
            continue
        fig, ax = new_plot(name, ylabel)
        for key in per_step:
            if drawn[key][0]:
                plot_noisy(ax, *drawn[key], label=key)
        for key in occasional:
            if drawn[key][0]:
                ax.plot(*drawn[key], "o-", label=key)
        if name == "reward":
            for value in series(rows, "eval/teacher_reward")[1][:1]:  # the level opd / sft distil toward
                ax.axhline(value, linestyle="--", color="gray", label="eval/teacher_reward")
        written.append(save(fig, ax, run_dir / "plots" / f"{name}.png"))
    return written
