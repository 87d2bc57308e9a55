"""What an evaluation evaluates: the models named on the command line, each found in the run dir before any server
starts. A step's weights are the export the trainer left in weights/step_N (full weights or a peft adapter), else its
checkpoint (checkpoints/step_N), exported for the server first; `merged` is a LoRA run's final merged model."""

from dataclasses import dataclass
from pathlib import Path

from prime_rl.config.user_error import UserError
from prime_rl.protocol.run_dir import RunDir

START, LATEST, MERGED, TEACHER = "start", "latest", "merged", "teacher"
MODEL_FILES = ("config.json", "adapter_config.json")  # a servable export (a pushed run's weights/ holds markers only)


@dataclass(frozen=True)
class Subject:
    label: str  # as the results name it: start, step_N, merged, or the model's name
    step: int | None  # the trainer step of its weights (None: not a step of a run)
    weights: Path | None  # the export to load into the server (None: the model it starts with)
    checkpoint: Path | None = None  # a checkpoint to export first, to `weights`

    @property
    def adapter(self) -> bool:
        return self.weights is not None and (self.weights / "adapter_config.json").exists()


def find_subjects(run: Path | None, specs: list[str], model_label: str, out: RunDir, teacher: bool) -> list[Subject]:
    """The subjects `specs` name in the run dir `run` (start, latest, N, merged); without a run, only the config's
    own model; with `teacher`, only the run's teacher. Raises a one-line UserError for a step the run does not hold,
    naming the ones it does."""
    if teacher:
        if specs:
            raise UserError(
                f"--teacher with --step {','.join(specs)}: the teacher has no steps, it is not trained; "
                "fix: evaluate the teacher and the student's steps in two commands"
            )
        return [Subject(TEACHER, None, None)]
    if run is None:
        if specs not in ([], [START]):
            raise UserError(
                f"--step {','.join(specs)} needs a run [--run]: without one the model evaluated is the config's "
                f"({model_label}); fix: add --run <run dir>, or drop --step",
                ["--step", "--run"],
            )
        return [Subject(model_label, None, None)]
    runs = RunDir(run)
    return [subject(runs, spec, out) for spec in dict.fromkeys(specs or [LATEST])]


def subject(run: RunDir, spec: str, out: RunDir) -> Subject:
    if spec in (START, "0"):
        return Subject(START, 0, None)
    if spec == MERGED:
        if not (run.merged / "config.json").exists():
            raise UserError(
                f"--step merged: {run.merged} holds no merged model (only a finished lora=on run writes "
                f"one); fix: name a step ({steps_text(run)})",
                ["--step"],
            )
        return Subject(MERGED, None, run.merged)
    if spec != LATEST and not spec.isdigit():
        raise UserError(
            f"--step {spec}: not a step; fix: give start, latest, merged or a number ({steps_text(run)})", ["--step"]
        )
    step = latest_step(run) if spec == LATEST else int(spec)
    if step in exported_steps(run):
        return Subject(f"step_{step}", step, run.weights(step))
    if step in run.checkpoints():
        return Subject(f"step_{step}", step, out.weights(step), run.checkpoint(step))
    raise UserError(
        f"--step {spec}: {run.root} holds no weights or checkpoint of step {step}; fix: name one it "
        f"holds ({steps_text(run)})",
        ["--step"],
    )


def exported_steps(run: RunDir) -> list[int]:
    """Steps whose weights/step_N is a complete export the server can load."""
    return [s for s in run.steps_in("weights") if run.weights_ready(s) and servable(run.weights(s))]


def servable(path: Path) -> bool:
    return any((path / name).exists() for name in MODEL_FILES)


def latest_step(run: RunDir) -> int:
    steps = exported_steps(run) + run.checkpoints()
    if not steps:
        raise UserError(
            f"--step latest: {run.root} holds no weights or checkpoint of any step (a run that never "
            f"finished a step); fix: --step start, or another run",
            ["--step"],
        )
    return max(steps)


def steps_text(run: RunDir) -> str:
    steps = sorted(set(exported_steps(run) + run.checkpoints()))
    named = [START, *map(str, steps)] + ([MERGED] if (run.merged / "config.json").exists() else [])
    return "it holds " + ", ".join(named)
