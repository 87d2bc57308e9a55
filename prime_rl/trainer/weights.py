"""How each step's weights reach the inference server: exported to weights/step_N/ (safetensors, or a peft adapter
dir), published whole; or pushed (inference.weight_transfer=nccl|gloo, weight_transfer/push.py)."""

import shutil
from pathlib import Path

import torch

from prime_rl.config.layout import pushes_weights
from prime_rl.config.schema import Config
from prime_rl.protocol.atomic import publish_dir
from prime_rl.protocol.handoff import announce
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.distributed import SINGLE, World, gathered_parameters


class Weights:
    """How each step's weights reach the student server: exported files it reloads, or a push when asked."""

    def __init__(self, cfg: Config, model, tokenizer, world: World, dtype: torch.dtype):
        self.model, self.tokenizer, self.world, self.dtype = model, tokenizer, world, dtype
        self.run_dir = RunDir(cfg.run_dir)
        self.pusher = None
        if pushes_weights(cfg):
            from prime_rl.weight_transfer.push import WeightPush  # only a pushing trainer imports vLLM

            self.pusher = WeightPush(cfg, model, world.rank, dtype)

    def publish(self, step: int) -> None:
        """Weights `step` exist for the orchestrator: as files, or (pushed) as the promise of a push."""
        if self.pusher:
            self.pusher.publish(step)
        else:
            export_weights(self.model, self.tokenizer, self.run_dir, step, self.world, self.dtype)
        if self.world.main:
            announce(self.run_dir.handoff("weights"))

    def push(self, step: int) -> None:
        """Pushed: weights `step` go to the server once the orchestrator asks; files: nothing left to do."""
        if self.pusher:
            self.pusher.push_when_asked(step)

    def take_times(self) -> dict[str, float]:
        return self.pusher.take_times() if self.pusher else {}

    def close(self) -> None:
        if self.pusher:
            self.pusher.close()


def export_weights(
    model, tokenizer, run_dir: RunDir, step: int, world: World = SINGLE, dtype: torch.dtype = torch.float32
) -> None:
    """weights/step_<step> in the server's `dtype` (the checkpoints keep the float32 master weights), published
    whole: a server never loads a half-written export."""
    lora = hasattr(model, "peft_config")
    state = None  # the model's own (unsharded) weights
    if world.size > 1:  # every rank gathers; rank 0 writes
        state = gathered_parameters(model, dtype, world)
    elif dtype != torch.float32 and not lora:  # an adapter is small, and the server casts it as it loads it
        state = in_dtype(model.state_dict(), dtype)

    # an adapter on the embedding or output layer: its A/B only; peft would add the frozen vocab x hidden matrix
    adapter = {"save_embedding_layers": False} if lora else {}

    def fill(out: Path) -> None:
        model.save_pretrained(out, state_dict=state, **adapter)
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
