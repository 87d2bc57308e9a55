"""A training mode of your own, written outside the package (docs/modes.md, "Adding a mode"): reward-weighted
sft. The student samples as in rl and the verifier scores the samples; the trainer then imitates its own samples,
each weighted by exp(A / beta) of its GRPO advantage A (advantage-weighted regression), so the better answers of a
group are learned from most, and none is pushed down.

Run it with its config group on Hydra's search path:

    python launch.py hydra.searchpath=[file://examples/conf] training_mode=reward_weighted_sft

or as one source of a mix: task.mix[i].mode=examples.reward_weighted_sft:MODE."""

from dataclasses import dataclass

import torch

from prime_rl.config.modes import Mode, RolloutSource, Scorer
from prime_rl.trainer.data import TokenBatch
from prime_rl.trainer.logprobs import Logprobs
from prime_rl.trainer.loss import ModeLoss, StepLoss


@dataclass
class RewardWeightedSftConfig:
    beta: float = 0.5  # temperature of the weights exp(A / beta): lower learns more from a group's best samples only
    max_weight: float = 20.0  # a sample's weight at most (exp grows fast)

    def __post_init__(self):
        if self.beta <= 0 or self.max_weight <= 0:
            raise ValueError(f"beta and max_weight must be > 0, got {self.beta} and {self.max_weight}")


class RewardWeightedNll(ModeLoss):
    """The NLL of the student's own tokens, each sample's weighted by min(exp(A / beta), max_weight)."""

    def for_step(self, mbs: list[TokenBatch]) -> StepLoss:
        knobs = self.knobs  # modes.reward_weighted_sft, typed as RewardWeightedSftConfig

        def step_loss(out: Logprobs, mb: TokenBatch, total_tokens: int) -> tuple[torch.Tensor, dict[str, float]]:
            mask = mb.loss_mask.float()
            weight = (mb.advantages / knobs.beta).exp().clamp(max=knobs.max_weight) * mask
            loss = -(weight * out.token).sum() / total_tokens
            return loss, {"rwsft/weight": weight.sum().item()}  # its mean over the step's tokens

        return step_loss


MODE = Mode(
    name="reward_weighted_sft",
    rollouts=RolloutSource.student,  # the student samples, as in rl
    scorer=Scorer.none,  # nobody scores its tokens: the rewards are the signal
    needs_rewards=True,
    advantages=True,  # GRPO advantages are computed (and weigh the samples here)
    algorithm="prime_rl.orchestrator.algo.rl:RL",  # rl's orchestrator part: nothing to add to a step
    loss=f"{__name__}:RewardWeightedNll",  # this module, wherever it is imported from
    config=RewardWeightedSftConfig,  # its knobs: modes.reward_weighted_sft.*
    signal="the NLL of its own samples, each weighted by exp(A / beta)",  # what its loss learns from, in one line
)
