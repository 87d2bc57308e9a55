"""Which sources a model judges (`task.verifier=judge`, per source in a mix) and which teacher's server judges
them (`judge.teacher`: a named one, else the run's `teacher`)."""

from dataclasses import replace
from string import Formatter

from prime_rl.config.schema import MIX, Config, TaskConfig, TaskSourceConfig, Verdict
from prime_rl.config.sources import mix_sources
from prime_rl.config.teachers import DEFAULT

JUDGE = "judge"  # task.verifier's value for a source whose rewards the judge gives
RUBRIC_FIELDS = ("prompt", "completion", "answer")  # what a rubric may name; {completion} it must


def judged_sources(cfg: Config) -> list[tuple[str, str, TaskSourceConfig]]:
    """(its label, the key of its verifier, the source) of each judged source."""
    if cfg.task.name != MIX:
        return [("", "task.verifier", cfg.task)] if cfg.task.verifier == JUDGE else []
    return [
        (label, f"task.mix[{i}].verifier", src)
        for i, (label, src) in enumerate(mix_sources(cfg.task))
        if src.verifier == JUDGE
    ]


def code_verified(task: TaskConfig) -> TaskConfig:
    """`task` with each judged source verified by the default verifier instead: for a reward where no judge serves
    (a tiny model's build records its greedy eval reward by code, whichever run builds it first)."""

    def unjudged(src):
        return replace(src, verifier=TaskSourceConfig.verifier) if src.verifier == JUDGE else src

    return replace(unjudged(task), mix=[unjudged(src) for src in task.mix])


def judged_labels(cfg: Config) -> frozenset[str]:
    """The labels of the judged sources ("" for a task of one source)."""
    return frozenset(label for label, _, _ in judged_sources(cfg))


def judge_teacher(cfg: Config) -> str | None:
    """The name of the teacher whose server judges ("" the run's `teacher`); None where no source is judged."""
    if not judged_sources(cfg):
        return None
    return DEFAULT if cfg.judge.teacher is None else cfg.judge.teacher


def rubric_fields(rubric: str) -> list[str]:
    """The {fields} a rubric names, in order (a malformed rubric raises ValueError)."""
    return [name for _, name, _, _ in Formatter().parse(rubric) if name is not None]


def serves_reward_model(cfg: Config, name: str) -> bool:
    """The teacher `name` is the run's judge and a reward model: a classifier that only judges, never chats (it is
    neither probed nor asked for answers)."""
    return cfg.judge.verdict == Verdict.reward_model and judge_teacher(cfg) == name
