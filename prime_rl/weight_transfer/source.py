"""The trainer's model as the student server loads it, for a pushed transfer: vLLM's `WeightSource` over the model's
parameters under their checkpoint names, each once (a tied output layer goes as the embedding, as in the files
export), in the server's dtype, an FSDP shard cast, then gathered, one parameter at a time (trainer/distributed.py)."""

from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

from prime_rl.config.user_error import UserError
from prime_rl.weight_transfer.gather import whole_parameters


class ModelWeights(WeightSource):
    def __init__(self, model: torch.nn.Module, dtype: torch.dtype):
        self.model = model
        self.dtype = dtype  # the server's (the trainer keeps its float32 master weights)

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(name, self.dtype, tuple(p.shape)) for name, p in self.model.named_parameters()]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return whole_parameters(self.model, self.dtype)


def check_checkpoint_names(model: torch.nn.Module, model_dir: Path) -> None:
    """Every parameter is pushed under its module name, which the server looks up as a checkpoint name: a model
    whose transformers modules are named otherwise than its files (a conversion on load) would stay stale there."""
    stored = set()
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(path, "pt") as f:
            stored.update(f.keys())
    foreign = [name for name, _ in model.named_parameters() if name not in stored]
    if foreign:
        raise UserError(
            f"inference.weight_transfer pushes parameters by name, but {len(foreign)} of this model's are not named "
            f"so in its checkpoint (e.g. {foreign[0]}); set inference.weight_transfer=files",
            ["inference.weight_transfer"],
        )
