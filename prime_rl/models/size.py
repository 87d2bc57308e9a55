"""How large a model is, counted from its config.json without loading a weight: its parameters (for the memory
the trainer needs and the time its state takes to write)."""

import functools
from pathlib import Path


def param_count(model_dir: Path) -> int:
    """Parameters of the model in `model_dir`, counted on the meta device: nothing is loaded."""
    return sum(param_sizes(model_dir))


def largest_param(model_dir: Path) -> int:
    """The elements of the model's largest parameter (the embedding, usually): what one transfer chunk can add."""
    return max(param_sizes(model_dir))


@functools.cache  # the fit checks ask for the count and the largest of the same model
def param_sizes(model_dir: Path) -> tuple[int, ...]:
    """Each parameter's elements, counted on the meta device: nothing is loaded."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return tuple(p.numel() for p in model.parameters())
