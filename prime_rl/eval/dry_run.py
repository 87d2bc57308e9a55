"""`python -m prime_rl.eval … --dry-run`: every point found and checked as an evaluation checks it (one-line errors),
then what each would do printed: the models it would serve and from where, the tasks, its dir, and where it would
run (here, on its own server or a standing one; or the SLURM resources it would ask for). Nothing is started,
exported, submitted or written."""

from pathlib import Path

from prime_rl.eval.points import Point, slurm_params
from prime_rl.eval.run import Checked
from prime_rl.eval.subjects import Subject

SLURM_SHOWN = ("partition", "nodes", "gpus_per_node", "cpus_per_task", "mem_gb", "timeout_min", "account", "qos")


def show_points(points: list[Point], checked: list[Checked], launcher: list[str], root: Path | None) -> None:
    for n, (point, found) in enumerate(zip(points, checked)):
        name = f"eval #{n} ({point.label})" if point.label else "eval"
        print(f"{name}: run {point.request.run or '-'} -> {found.out}")
        print(f"  models: {', '.join(served_from(s, found) for s in found.subjects)}")
        harness = f"; lm-eval: {', '.join(point.request.harness)}" if point.request.harness else ""
        print(f"  tasks: {', '.join(found.tasks)}{harness}")
        print(f"  where: {where(point, found, launcher, root)}")
    joined = f", joined in {root / 'results.json'}" if root is not None else ""
    print(f"dry run: {len(points)} evaluation(s) checked{joined}; nothing started or written", flush=True)


def served_from(subject: Subject, found: Checked) -> str:
    if subject.checkpoint is not None:
        return f"{subject.label} (checkpoint {subject.checkpoint}, exported first)"
    return f"{subject.label} ({subject.weights or found.cfg.model.name})"


def where(point: Point, found: Checked, launcher: list[str], root: Path | None) -> str:
    if launcher:
        params = slurm_params(point, launcher, (root or found.out) / ".submitit")
        return "SLURM: " + " ".join(f"{k}={params[k]}" for k in SLURM_SHOWN if params.get(k) is not None)
    if found.cfg.inference.url:
        return f"here, on the standing server {found.cfg.inference.url}"
    gpus = found.cfg.deployment.num_infer_gpus
    return f"here, on a vLLM server of its own ({f'{gpus} GPU(s)' if gpus else 'CPU'})"
