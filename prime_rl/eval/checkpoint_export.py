"""A checkpoint the trainer left (checkpoints/step_N) made servable: its model weights loaded into the student as the
trainer builds it (LoRA adapter included), then exported as the trainer exports a step's weights (weights/step_N in
the server's dtype, or the peft adapter)."""

from pathlib import Path

import torch

from prime_rl.config.layout import on_gpu, server_dtype
from prime_rl.config.schema import Config
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.checkpoint import load_model_weights
from prime_rl.trainer.model import load_model
from prime_rl.trainer.weights import export_weights


def export_checkpoint(cfg: Config, checkpoint: Path, step: int, out: RunDir) -> None:
    """out/weights/step_<step> from `checkpoint`, on the CPU (it fits wherever the trainer's float32 weights fit)."""
    model, tokenizer = load_model(cfg, torch.device("cpu"))
    load_model_weights(checkpoint, model)
    export_weights(model, tokenizer, out, step, dtype=getattr(torch, server_dtype(cfg, on_gpu(cfg))))
