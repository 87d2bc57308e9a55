"""Run dirs and sweep dirs laid out as launch.py leaves them, without training: the overrides Hydra records, complete
exports (full weights or a peft adapter), checkpoints, pushed steps (markers only) and a merged model. What an
evaluation finds and checks before any server starts reads nothing more."""

from pathlib import Path

from prime_rl.eval.configs import RUN_OVERRIDES
from prime_rl.eval.points import SWEEP_RECORD
from prime_rl.protocol.atomic import STABLE_MARKER
from prime_rl.protocol.run_dir import RunDir


def run_dir_with(
    root: Path, exports=(), checkpoints=(), markers_only=(), merged=False, overrides=(), adapters=False
) -> Path:
    """A run dir's layout: complete exports (full weights, or adapters), complete checkpoints, pushed steps."""
    run = RunDir(root)
    root.mkdir(parents=True, exist_ok=True)
    if overrides:
        write_overrides(root, overrides)
    for step in exports:
        marked(run.weights(step))
        (run.weights(step) / ("adapter_config.json" if adapters else "config.json")).write_text("{}")
    for step in markers_only:
        marked(run.weights(step))
    for step in checkpoints:
        marked(run.checkpoint(step))
    if merged:
        run.merged.mkdir()
        (run.merged / "config.json").write_text("{}")
    return root


def sweep_dir_of(root: Path, taus: list[float], exports=(), overrides=()) -> Path:
    """A teacher_tau sweep's dir as launch.py -m writes it: its record, and a job dir per point with its overrides
    (opd with a local teacher, `overrides` too) and `exports`."""
    for n, tau in enumerate(taus):
        job = ["training_mode=opd", "teacher=local_vllm", f"trainer.loss.teacher_tau={tau}", *overrides]
        run_dir_with(root / str(n), exports=exports, overrides=job)
    (root / SWEEP_RECORD).write_text("{}")
    return root


def write_overrides(root: Path, overrides) -> None:
    (root / RUN_OVERRIDES).parent.mkdir(parents=True, exist_ok=True)
    (root / RUN_OVERRIDES).write_text("".join(f"- {o}\n" for o in overrides))


def marked(path: Path) -> None:
    """A dir its writer marked complete."""
    path.mkdir(parents=True)
    (path / STABLE_MARKER).touch()
