"""What the trainer minimises in a step, as the run's mode says (config/modes.py): the importance-weighted policy
loss, with the teacher term where the mode has one, or the NLL of teacher-written tokens."""

from collections.abc import Callable
from functools import partial

import torch

from prime_rl.config.modes import Loss, mode_of
from prime_rl.config.schema import Config
from prime_rl.trainer.data import TokenBatch
from prime_rl.trainer.loss import distill_center, rl_loss, sft_loss

# (logprobs, micro-batch, total_tokens=the step's token count) -> (loss, metric sums)
StepLoss = Callable[[torch.Tensor, TokenBatch, int], tuple[torch.Tensor, dict[str, float]]]


class Objective:
    def __init__(self, cfg: Config):
        self.mode, self.loss_cfg = mode_of(cfg), cfg.trainer.loss
        # pi is the policy that sampled, at its temperature (vLLM reports mu the same way, --logprobs-mode
        # processed_logprobs); teacher-written tokens are plain targets: NLL at temperature 1
        self.temperature = cfg.orchestrator.sampling.temperature if self.mode.trains_sampled_policy else 1.0

    def for_step(self, mbs: list[TokenBatch]) -> StepLoss:
        """The loss of every micro-batch of a step, given all of the step's micro-batches (before any rank split):
        the teacher term is centred on the mean of the whole step."""
        if self.mode.loss == Loss.nll:
            return sft_loss
        center = distill_center(mbs, self.loss_cfg) if self.mode.teacher_term else None
        return partial(rl_loss, cfg=self.loss_cfg, teacher_center=center)
