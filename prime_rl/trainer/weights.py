"""Weight export for the inference server: weights/step_N/ (safetensors, or a peft adapter dir), published whole."""

import shutil
from pathlib import Path

from prime_rl.protocol.atomic import publish_dir
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.distributed import SINGLE, World, full_model_state


def export_weights(model, tokenizer, run_dir: RunDir, step: int, world: World = SINGLE) -> None:
    """weights/step_<step>, published whole: a server never loads a half-written export."""
    state = full_model_state(model) if world.size > 1 else None  # every rank gathers; rank 0 writes

    def fill(out: Path) -> None:
        model.save_pretrained(out, state_dict=state)  # None: the model's own (unsharded) weights
        tokenizer.save_pretrained(out)

    if world.main:
        publish_dir(run_dir.weights(step), fill)


def prune_weights(run_dir: RunDir, keep_from: int) -> None:
    """Delete exports older than `keep_from` (the server may still be loading anything newer)."""
    for step in run_dir.steps_in("weights"):
        if step < keep_from:
            shutil.rmtree(run_dir.weights(step), ignore_errors=True)


def export_merged(model, tokenizer, out_dir) -> None:
    """lora=on, end of training: the base model with the adapter folded in, loadable without peft."""
    merged = model.merge_and_unload()
    merged.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
