"""A vLLM worker extension (`--worker-extension-cls`) for the in-place weight update of every step, exact for
tied embeddings too.

vLLM's layerwise reload re-runs a layer's post-load processing only when that layer's own checkpoint tensors
arrive. A tied output layer (`lm_head` sharing `embed_tokens.weight`, as in small Qwen and Llama models) gets
none: the trainer's export holds `model.embed_tokens.weight` only. On CPU that processing is what computes the
logits (a oneDNN matmul handle holding its own copy of the weight), so without it the server would keep sampling
from the output layer it started with. Called through `/collective_rpc` (inference/client.py).

Importing it (vLLM does, in every worker) also registers the `gloo` weight-transfer engine of
inference.weight_transfer=gloo with vLLM's factory, before the worker builds its engine.
"""

import contextlib

import torch
from vllm.config import set_current_vllm_config
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

from prime_rl.config.schema import WeightTransfer

# inference.weight_transfer=gloo's receiving engine, by its path: vLLM imports it only in a server configured with it
with contextlib.suppress(ValueError):  # registered already in this process
    WeightTransferEngineFactory.register_engine(
        WeightTransfer.gloo.value, "prime_rl.weight_transfer.gloo", "GlooWeightTransferEngine"
    )


class WeightReload:
    """Mixed into vLLM's worker: `self` is the worker, with its model runner and config."""

    def reload_policy(self, weights_path: str) -> int:  # protocol.servers.RELOAD_METHOD names it
        """vLLM's in-place reload from `weights_path`, then the tied output layers' refresh."""
        self.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        return self.refresh_shared_output_layers()

    def refresh_shared_output_layers(self) -> int:  # protocol.servers.REFRESH_METHOD names it
        """The post-load processing of each output layer whose weight another module owns too, after any in-place
        update (a reload from files, a pushed transfer); returns how many there were."""
        heads = shared_output_layers(self.model_runner.get_model())
        with set_current_vllm_config(self.vllm_config):
            for head in heads:
                head.quant_method.process_weights_after_loading(head)
        return len(heads)


def shared_output_layers(model: torch.nn.Module) -> list[ParallelLMHead]:
    """The output layers whose weight Parameter is also held by another module (tied embeddings)."""
    holders: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            holders[id(p)] = holders.get(id(p), 0) + 1
    return [m for m in model.modules() if isinstance(m, ParallelLMHead) and holders.get(id(m.weight), 0) > 1]
