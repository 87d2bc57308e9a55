"""What a training mode is, in one object: who writes the rollouts, who scores the sampled tokens, whether rewards
and advantages are needed, its orchestrator part, its loss and its own knobs (docs/modes.md).

Every process reads these facts instead of branching on the mode's name: validation states its rules from them
(config/rules/), the orchestrator runs the mode's part (`Mode.algorithm`, orchestrator/algo/), the trainer its
loss (`Mode.loss`, trainer/loss.py), the launcher the servers' settings (inference/server.py). A built-in mode is one
entry of MODES plus its part in orchestrator/algo/; a researcher's own is a `Mode` in their own module, named by
import path (training_mode=<module>:<name> in a config file, task.mix[i].mode=<module>:<name>) and registered when
a config first names it (`OWN_MODES`): every message that lists modes lists it too. A mix's sources may
each set their own mode: what a mode needs is then looked up per source (`source_modes`, `example_mode`), and what
the run's processes need is what any of its modes needs (`run_modes`).
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from prime_rl.config.schema import MIX, Config, DistillSignal, TaskSourceConfig
from prime_rl.config.user_error import ConfigError, first_line


class RolloutSource(str, Enum):
    student = "student"  # the student's vLLM server samples them (the trainer then reproduces its policy)
    teacher = "teacher"  # the teacher's chat endpoint writes them (the student's tokenizer re-tokenizes them)


class Scorer(str, Enum):
    none = "none"  # nobody: the rewards (or the teacher's answers) are the whole signal
    teacher = "teacher"  # the source's teacher server, from its prompt logprobs of the student's tokens
    self = "self"  # the student's own server (the weights that sampled), shown the example's reference answer


@dataclass(frozen=True)
class Mode:
    name: str  # what samples, metrics and modes.<name> call it (training_mode's value for a built-in one)
    rollouts: RolloutSource  # who writes the rollouts
    scorer: Scorer  # who scores each sampled token for the term teacher_tau * (log p_scorer - log pi)
    needs_rewards: bool  # the loss learns from task rewards: verification must be on
    advantages: bool  # GRPO advantages (weighted by adv_tau) enter the loss
    # <module>:<class> of its orchestrator part and of its loss, imported where they run (the orchestrator, the
    # trainer): validating a config never imports torch. Each is built with the mode and its typed knobs.
    algorithm: str  # an orchestrator.algo.base.Algorithm
    loss: str  # a trainer.loss.ModeLoss
    config: type | None = None  # the dataclass of its own knobs, set under modes.<name> (None: it has none)
    needs_answers: bool = False  # its signal reads each prompt's reference answer: single-turn prompts with one
    signal: str = ""  # what its loss learns from, in one line: the docs' table of modes shows it

    @property
    def teacher(self) -> bool:
        """A teacher is required (it writes or scores), else refused."""
        return self.rollouts == RolloutSource.teacher or self.scorer == Scorer.teacher

    @property
    def scores_tokens(self) -> bool:
        """A per-token distillation term (trainer.loss.teacher_tau and the distill knobs apply)."""
        return self.scorer != Scorer.none

    @property
    def trains_sampled_policy(self) -> bool:
        """The trainer recomputes the policy that sampled: the same temperature, no truncation (top_p), no dropout
        (vLLM never drops out). Teacher rollouts are plain targets: sft keeps dropout as a regulariser."""
        return self.rollouts == RolloutSource.student

    @property
    def context_margin(self) -> int:
        """Tokens the student's server keeps free of its max_model_len: a teacher scores a whole student sequence in
        a request for one more token, which must still fit the teacher's context."""
        return 1 if self.scorer == Scorer.teacher else 0


class FixedCompletions(str, Enum):
    answer = "answer"  # the example's reference answer
    teacher = "teacher"  # the teacher's own answers, the same ones each time (kept in teacher.cache_dir, if set)


@dataclass
class OpdConfig:
    on_policy: float = 1.0  # GKD's lambda: the share of prompts the student samples, the rest on fixed completions
    fixed: FixedCompletions = FixedCompletions.answer  # the fixed completions: answer | teacher (its own answers)

    def __post_init__(self):
        if not 0 <= self.on_policy <= 1:
            raise ValueError("modes.opd.on_policy is the share of prompts the student samples: between 0 and 1")


SHOWN_ANSWER = "The reference answer: {answer}"  # opsd's context; a context-reading tiny model learns to read it


class SelfTeacher(str, Enum):
    live = "live"  # the policy that sampled: the student's server as it is
    initial = "initial"  # the starting weights (θ0): under LoRA the server's base model, else the served reference
    lagged = "lagged"  # the policy every `lag` steps: under LoRA a second adapter, else in the starting weights' server


@dataclass
class OpsdConfig:
    context: str = SHOWN_ANSWER  # system message of self-scoring: {answer} is the example's reference answer
    teacher: SelfTeacher = SelfTeacher.live  # the weights that score: live | initial (θ0) | lagged (every `lag` steps)
    lag: int = 0  # teacher=lagged: steps between refreshes of the scoring copy

    def __post_init__(self):
        if "{answer}" not in self.context:
            raise ValueError("modes.opsd.context must show the reference answer: put {answer} in it")
        if (self.teacher == SelfTeacher.lagged) != (self.lag > 0):
            raise ValueError(
                "modes.opsd.lag is a lagged teacher's refresh interval: above 0 with teacher=lagged, 0 otherwise"
            )


ALGO, LOSS = "prime_rl.orchestrator.algo", "prime_rl.trainer.loss"
STUDENT, TEACHER = RolloutSource.student, RolloutSource.teacher
MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode(
            "rl",
            rollouts=STUDENT,
            scorer=Scorer.none,
            needs_rewards=True,
            advantages=True,
            algorithm=f"{ALGO}.rl:RL",
            loss=f"{LOSS}:PolicyLoss",
            signal="`adv_tau·A` (GRPO advantages from the task's rewards)",
        ),
        Mode(
            "opd",
            rollouts=STUDENT,
            scorer=Scorer.teacher,
            needs_rewards=False,
            advantages=True,
            algorithm=f"{ALGO}.opd:OPD",
            loss=f"{LOSS}:PolicyLoss",
            signal="`adv_tau·A + teacher_tau·(log p_teacher − log p_student)` per token, or the top-k KL",
            config=OpdConfig,
        ),
        Mode(
            "sft",
            rollouts=TEACHER,
            scorer=Scorer.none,
            needs_rewards=False,
            advantages=False,
            algorithm=f"{ALGO}.sft:SFT",
            loss=f"{LOSS}:NllLoss",
            signal="NLL of the teacher's answers",
        ),
        Mode(
            "opsd",
            rollouts=STUDENT,
            scorer=Scorer.self,
            needs_rewards=False,
            advantages=True,
            algorithm=f"{ALGO}.opsd:OPSD",
            loss=f"{LOSS}:PolicyLoss",
            signal="`adv_tau·A + teacher_tau·(log p_privileged − log p_student)` per token, or the top-k KL",
            config=OpsdConfig,
            needs_answers=True,
        ),
    )
}


# fine-tuning on given answers (trainer/supervised.py: the warm start, python -m prime_rl.finetune) trains in it
SUPERVISED = MODES["sft"]


def import_object(path: str, key: str, what: str) -> object:
    """The object `<module>:<name>` names, or a ConfigError on `key` saying why there is none."""
    module_name, _, name = path.partition(":")
    if not (module_name and name):
        raise ConfigError([key], f"{path!r} is no {what} and not <module>:<name>", f"name a {what} as <module>:<name>")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError([key], f"cannot import {path!r}: {first_line(e)}", "make the module importable") from e


OWN_MODES: dict[str, Mode] = {}  # a researcher's own modes, by the import path a config named each by


def mode_named(spec: str, key: str = "training_mode") -> Mode:
    """A built-in mode by name, or a researcher's own `Mode` by import path, registered: messages list it."""
    if spec in MODES:
        return MODES[spec]
    if spec not in OWN_MODES:
        OWN_MODES[spec] = imported_mode(spec, key)
    return OWN_MODES[spec]


def imported_mode(spec: str, key: str) -> Mode:
    if ":" not in spec:
        raise ConfigError([key], f"unknown mode {spec!r}", f"use one of {' | '.join(MODES)}, or <module>:<Mode>")
    mode = import_object(spec, key, "mode")
    if not isinstance(mode, Mode):
        raise ConfigError([key], f"{spec} is a {type(mode).__name__}, not a Mode", "name a prime_rl Mode object")
    return mode


def source_modes(cfg: Config) -> list[tuple[str, TaskSourceConfig, Mode]]:
    """(the key that sets its mode, the source, its mode) of each task source: a mix source's own mode or else
    training_mode's; the task itself with training_mode's where it is no mix."""
    if cfg.task.name != MIX:
        return [("training_mode", cfg.task, mode_named(cfg.training_mode))]
    return [
        (f"task.mix[{i}].mode", src, mode_named(src.mode, f"task.mix[{i}].mode"))
        if src.mode
        else ("training_mode", src, mode_named(cfg.training_mode))
        for i, src in enumerate(cfg.task.mix)
    ]


def run_modes(cfg: Config) -> list[Mode]:
    """The modes the run trains with, each once: its processes are set up for every one of them."""
    return list(dict.fromkeys(mode for _, _, mode in source_modes(cfg)))


def uses(cfg: Config, fact: Callable[[Mode], bool]) -> bool:
    """Whether any of the run's modes has `fact` (a scorer, teacher-written rollouts, ...)."""
    return any(fact(mode) for mode in run_modes(cfg))


def modes_with(fact: Callable[[Mode], bool]) -> str:
    """The registered modes (built-in, and the own ones a config named) that have `fact`, as training_mode names
    them in a message: rl|opd|my_lab.modes:MODE."""
    return "|".join(spec for spec, m in {**MODES, **OWN_MODES}.items() if fact(m))


def example_mode(cfg: Config, example) -> Mode:
    """The mode a prompt trains with: its source's (an Example's `mode`, set in a mix), else the run's."""
    return mode_named(example.mode or cfg.training_mode)


def mode_config(cfg: Config, mode: Mode):
    """The mode's own knobs: modes.<name> over its dataclass's defaults, typed and checked (its __post_init__); None
    for a mode without knobs."""
    if mode.config is None:
        return None
    key = f"modes.{mode.name}"
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(mode.config), cfg.modes.get(mode.name, {})))
    except (OmegaConfBaseException, ValueError, TypeError) as e:
        where = "docs/modes.md" if mode.name in MODES else f"{mode.config.__module__}.{mode.config.__qualname__}"
        raise ConfigError([key], first_line(e), f"see the knobs of {mode.name} in {where}") from e


def self_teachers(cfg: Config) -> set[SelfTeacher]:
    """The weights the run's self-scoring modes score with (modes.<name>.teacher)."""
    return {teacher for mode in run_modes(cfg) for teacher in self_teachers_of(cfg, mode)}


def self_teachers_of(cfg: Config, mode: Mode) -> set[SelfTeacher]:
    """The weights `mode` scores with where it scores itself (its knobs' `teacher`); none for another mode."""
    teacher = getattr(mode_config(cfg, mode), "teacher", None)
    return {teacher} if isinstance(teacher, SelfTeacher) else set()


def context_margin(cfg: Config) -> int:
    """Tokens the student's sequences keep free of the context: the most any of the run's modes needs."""
    return max(mode.context_margin for mode in run_modes(cfg))


def distill_top_k(cfg: Config) -> int:
    """The scorer's logprobs per position the run distils from (trainer.loss.distill=topk); 0: the sampled token's."""
    distills = uses(cfg, lambda m: m.scores_tokens) and cfg.trainer.loss.distill == DistillSignal.topk
    return cfg.trainer.loss.distill_top_k if distills else 0
