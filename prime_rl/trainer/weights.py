"""Weight export for the inference server: weights/step_N/ (safetensors, or a peft adapter dir), published whole."""

import shutil
from pathlib import Path

import torch

from prime_rl.protocol.atomic import publish_dir
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.distributed import SINGLE, World, full_model_state


def export_weights(
    model, tokenizer, run_dir: RunDir, step: int, world: World = SINGLE, dtype: torch.dtype = torch.float32
) -> None:
    """weights/step_<step> in the server's `dtype` (the checkpoints keep the float32 master weights), published
    whole: a server never loads a half-written export."""
    lora = hasattr(model, "peft_config")
    state = full_model_state(model) if world.size > 1 else None  # every rank gathers; rank 0 writes
    if dtype != torch.float32 and not lora:  # an adapter is small, and the server casts it as it loads it
        state = in_dtype(model.state_dict() if state is None else state, dtype)

    # an adapter on the embedding or output layer: its A/B only; peft would add the frozen vocab x hidden matrix
    adapter = {"save_embedding_layers": False} if lora else {}

    def fill(out: Path) -> None:
        model.save_pretrained(out, state_dict=state, **adapter)  # None: the model's own (unsharded) weights
        tokenizer.save_pretrained(out)

    if world.main:
        publish_dir(run_dir.weights(step), fill)


def in_dtype(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """`state`'s floating-point tensors in `dtype`, on the CPU one at a time (a GPU holds at most one cast tensor
    beyond its own); tensors that are one (a tied output layer) stay one, so it is written once."""
    cast: dict[tuple, torch.Tensor] = {}
    for t in state.values():
        if (t.data_ptr(), t.shape) not in cast:
            cast[t.data_ptr(), t.shape] = t.detach().to("cpu", dtype if t.is_floating_point() else t.dtype)
    return {name: cast[t.data_ptr(), t.shape] for name, t in state.items()}


def prune_weights(run_dir: RunDir, keep_from: int) -> None:
    """Delete exports older than `keep_from` (the server may still be loading anything newer)."""
    for step in run_dir.steps_in("weights"):
        if step < keep_from:
            shutil.rmtree(run_dir.weights(step), ignore_errors=True)


def export_merged(model, tokenizer, out_dir) -> None:
    """lora=on, end of training: the base model with the adapter folded in, loadable without peft."""
    untie_adapted_head(model)
    merged = model.merge_and_unload()
    merged.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def untie_adapted_head(model) -> None:
    """A tied output layer whose adapter differs from the embedding's (lora=embeddings) gets its own copy of the
    matrix before merging: one shared matrix cannot hold two different updates."""
    base = model.get_base_model()
    embedding, head = base.get_input_embeddings(), base.get_output_embeddings()
    plain_embedding, plain_head = getattr(embedding, "base_layer", embedding), getattr(head, "base_layer", head)
    adapted = embedding is not plain_embedding or head is not plain_head
    if adapted and plain_head.weight is plain_embedding.weight:
        plain_head.weight = torch.nn.Parameter(plain_embedding.weight.detach().clone(), requires_grad=False)
        base.config.tie_word_embeddings = False
