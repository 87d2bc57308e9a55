"""How large a model is, counted without loading a weight: its parameters (for the memory the trainer needs, the
time its state takes to write, and whether bf16 pays on a CPU)."""

import functools
import json
import math
from pathlib import Path

SAFETENSORS_INDEX = "model.safetensors.index.json"  # a sharded checkpoint's map of tensor -> shard file
SAFETENSORS_FILE = "model.safetensors"  # a checkpoint in one file


def param_count(model_dir: Path) -> int:
    """Parameters of the model in `model_dir`; nothing is loaded."""
    return sum(param_sizes(model_dir))


def largest_param(model_dir: Path) -> int:
    """The elements of the model's largest parameter (the embedding, usually): what one transfer chunk can add."""
    return max(param_sizes(model_dir))


@functools.cache  # the fit checks ask for the count and the largest of the same model
def param_sizes(model_dir: Path) -> tuple[int, ...]:
    """Each parameter's elements: from the safetensors headers where the weights are on disk (milliseconds, and
    the launcher imports no torch), else from the config on the meta device (seconds: transformers' import)."""
    shards = safetensors_files(model_dir)
    return header_sizes(shards) if shards else meta_sizes(model_dir)


def safetensors_files(model_dir: Path) -> list[Path]:
    """The checkpoint's safetensors files as transformers loads them (the index's shards, or the one file); other
    .safetensors beside them (a repo's consolidated copy) are not the model's."""
    index = model_dir / SAFETENSORS_INDEX
    if index.is_file():
        return [model_dir / name for name in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    return [model_dir / SAFETENSORS_FILE] if (model_dir / SAFETENSORS_FILE).is_file() else []


def header_sizes(shards: list[Path]) -> tuple[int, ...]:
    """Each saved tensor's elements, read from the files' headers (a tied head is saved once, like it counts once)."""
    from safetensors import safe_open

    sizes = []
    for shard in shards:
        with safe_open(shard, framework="numpy") as f:
            sizes += [math.prod(f.get_slice(name).get_shape()) for name in f.keys()]
    return tuple(sizes)


def meta_sizes(model_dir: Path) -> tuple[int, ...]:
    """Each parameter's elements, counted on the meta device from the config alone."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return tuple(p.numel() for p in model.parameters())
