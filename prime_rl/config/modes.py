"""What a training mode is, in one place: who writes the rollouts, whether a teacher takes part and how, whether
rewards are needed, which loss trains the student.

Every process reads these facts instead of branching on the mode's name: validation states its rules from them
(config/rules.py), the orchestrator picks the mode's step (orchestrator/algo/), the trainer its loss
(trainer/loss.py Objective), the launcher the servers' settings. A new mode is one `Mode` here plus one file in
orchestrator/algo/ (docs/architecture.md, "Adding a mode"). A mix's sources may each set their own mode
(task.mix[i].mode): what a mode needs is then looked up per source (`source_modes`, `example_mode`), and what the
run's processes need is what any of its modes needs (`run_modes`).
"""

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from prime_rl.config.schema import MIX, Config, DistillSignal, TaskSourceConfig, TrainingMode


class RolloutSource(str, Enum):
    student = "student"  # the student's vLLM server samples them (the trainer then reproduces its policy)
    teacher = "teacher"  # the teacher's chat endpoint writes them (the student's tokenizer re-tokenizes them)


class Loss(str, Enum):
    policy = "policy"  # importance-weighted policy gradient on the per-token advantage (trainer/loss.py rl_loss)
    nll = "nll"  # negative log-likelihood of the completion tokens (trainer/loss.py sft_loss)


@dataclass(frozen=True)
class Mode:
    name: TrainingMode  # the user-facing training_mode
    rollouts: RolloutSource  # who writes the rollouts
    teacher: bool  # a teacher is required (True) or refused (False)
    needs_rewards: bool  # the loss learns from task rewards: verification must be on
    teacher_term: bool  # per-token teacher advantage teacher_tau * (log p_T - log pi): teacher_tau > 0 exactly here
    loss: Loss  # what the trainer minimises

    @property
    def trains_sampled_policy(self) -> bool:
        """The trainer recomputes the policy that sampled: the same temperature, no truncation (top_p), no dropout
        (vLLM never drops out). Teacher rollouts are plain targets: sft keeps dropout as a regulariser."""
        return self.rollouts == RolloutSource.student

    @property
    def uses_advantages(self) -> bool:
        """GRPO advantages (weighted by adv_tau) enter the loss."""
        return self.loss == Loss.policy

    @property
    def context_margin(self) -> int:
        """Tokens the student's server keeps free of its max_model_len: opd's teacher scores a whole student
        sequence in a request for one more token, which must still fit the teacher's context."""
        return 1 if self.teacher_term else 0


MODES: dict[TrainingMode, Mode] = {
    TrainingMode.rl: Mode(
        TrainingMode.rl,
        RolloutSource.student,
        teacher=False,
        needs_rewards=True,
        teacher_term=False,
        loss=Loss.policy,
    ),
    TrainingMode.opd: Mode(
        TrainingMode.opd,
        RolloutSource.student,
        teacher=True,
        needs_rewards=False,
        teacher_term=True,
        loss=Loss.policy,
    ),
    TrainingMode.sft: Mode(
        TrainingMode.sft,
        RolloutSource.teacher,
        teacher=True,
        needs_rewards=False,
        teacher_term=False,
        loss=Loss.nll,
    ),
}


def source_modes(cfg: Config) -> list[tuple[str, TaskSourceConfig, Mode]]:
    """(the key that sets its mode, the source, its mode) of each task source: a mix source's own mode or else
    training_mode's; the task itself with training_mode's where it is no mix."""
    if cfg.task.name != MIX:
        return [("training_mode", cfg.task, MODES[cfg.training_mode])]
    return [
        (f"task.mix[{i}].mode", src, MODES[src.mode]) if src.mode else ("training_mode", src, MODES[cfg.training_mode])
        for i, src in enumerate(cfg.task.mix)
    ]


def run_modes(cfg: Config) -> list[Mode]:
    """The modes the run trains with, each once: its processes are set up for every one of them."""
    return list(dict.fromkeys(mode for _, _, mode in source_modes(cfg)))


def uses(cfg: Config, fact: Callable[[Mode], bool]) -> bool:
    """Whether any of the run's modes has `fact` (a teacher term, teacher-written rollouts, ...)."""
    return any(fact(mode) for mode in run_modes(cfg))


def example_mode(cfg: Config, example) -> Mode:
    """The mode a prompt trains with: its source's (an Example's `mode`, set in a mix), else the run's."""
    return MODES[TrainingMode(example.mode) if example.mode else cfg.training_mode]


def context_margin(cfg: Config) -> int:
    """Tokens the student's sequences keep free of the context: the most any of the run's modes needs."""
    return max(mode.context_margin for mode in run_modes(cfg))


def distill_top_k(cfg: Config) -> int:
    """The teacher logprobs per position the run distils from (trainer.loss.distill=topk); 0: the sampled token's."""
    distills = uses(cfg, lambda m: m.teacher_term) and cfg.trainer.loss.distill == DistillSignal.topk
    return cfg.trainer.loss.distill_top_k if distills else 0
