"""The frozen reference policy of trainer.loss.kl_ref_tau: the student as the run started (a resumed run too).

Under LoRA it is the trained model with its adapter switched off: the base weights never train, so no second copy
exists. For full fine-tuning it is a second copy of the starting weights, loaded like the trained model (sharded
the same way under torchrun), without gradients or optimizer state: one more set of weights in memory; or, with
trainer.loss.kl_ref_from=vllm, no weights here at all: a vLLM server of the starting weights scored each sample
(orchestrator/reference.py) and the batch carries its logprobs."""

import torch

from prime_rl.config.schema import Config, ReferenceSource
from prime_rl.protocol.batch import REF_LOGPROBS
from prime_rl.trainer.data import TokenBatch
from prime_rl.trainer.distributed import World, load_sharded_model
from prime_rl.trainer.model import compute_dtype, load_model, policy_logprobs


class Reference:
    def __init__(self, cfg: Config, model, device: torch.device, world: World):
        self.served = cfg.trainer.loss.kl_ref_from == ReferenceSource.vllm
        self.lora = cfg.trainer.lora.enabled
        self.model = None if self.served else model if self.lora else frozen_copy(cfg, device, world)

    @torch.no_grad()
    def logprobs(self, mb: TokenBatch, temperature: float, compute: torch.dtype, fused_head: bool) -> torch.Tensor:
        """[B, T] each token's logprob under the reference, like policy_logprobs under the trained model (served:
        0 at the tokens of a micro-batch that trains none, which the loss mask drops)."""
        if self.served:
            return mb.streams.get(REF_LOGPROBS, torch.zeros_like(mb.inference_logprobs))
        if not self.lora:
            return policy_logprobs(self.model, mb, temperature, compute, fused_head).token
        training = self.model.training
        self.model.eval()  # the adapter's dropout off (rl and opd refuse it; sft may have it)
        with self.model.disable_adapter():
            logprobs = policy_logprobs(self.model, mb, temperature, compute, fused_head).token
        self.model.train(training)
        return logprobs


def frozen_copy(cfg: Config, device: torch.device, world: World):
    """The starting weights, loaded as the trained model is, frozen."""
    if world.size > 1:
        model, _ = load_sharded_model(cfg, device, world, compute_dtype(cfg, device))
    else:
        model, _ = load_model(cfg, device)
    return model.requires_grad_(False).eval()
