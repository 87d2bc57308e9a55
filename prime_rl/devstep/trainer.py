"""The trainer in this process, as trainer/train.py builds it for one process: the model (float32 master weights,
LoRA's adapter), AdamW and its schedule, the fused output layer where it is plain, the run's Objective, the frozen
reference where kl_ref_tau > 0, and the starting weights published as weights/step_0 for the orchestrator to load.
Then one `train_step` on the batch handed over in memory, and the token batch that step collates."""

import os
from dataclasses import dataclass

import torch
from transformers.utils.logging import disable_progress_bar

from prime_rl.config.layout import is_colocated, on_gpu, server_dtype, trainer_threads
from prime_rl.config.schema import Config
from prime_rl.launcher.plan import Plan
from prime_rl.models.chat import padding_id
from prime_rl.protocol.batch import Batch, Sample
from prime_rl.protocol.device_turn import DeviceTurn
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.data import TokenBatch, micro_batches
from prime_rl.trainer.distributed import SINGLE
from prime_rl.trainer.loss import Objective
from prime_rl.trainer.model import decoder_and_head, head_is_plain, load_model, pick_device
from prime_rl.trainer.reference import Reference
from prime_rl.trainer.step import make_optimizer, micro_batch_size, train_step
from prime_rl.trainer.weights import Weights

START = 0  # the step a devstep makes: the first, from the student's starting weights


@dataclass
class Trainer:
    cfg: Config
    model: object
    optimizer: torch.optim.Optimizer
    scheduler: object
    device: torch.device
    pad_id: int
    fused: bool  # the logprobs straight from the final hidden states and a plain output layer
    objective: Objective
    reference: Reference | None


def load_trainer(plan: Plan) -> Trainer:
    """The trainer's state on the plan's trainer devices, and weights/step_0 published, as train.py before its loop."""
    cfg = plan.config
    use_devices(plan)
    disable_progress_bar()
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(trainer_threads(cfg))
    device = pick_device(cfg.trainer.device)
    model, tokenizer = load_model(cfg, device)
    optimizer, scheduler = make_optimizer(cfg, model)
    weights = Weights(cfg, model, tokenizer, SINGLE, getattr(torch, server_dtype(cfg, on_gpu(cfg))))
    weights.publish(START)
    reference = Reference(cfg, model, device, SINGLE) if cfg.trainer.loss.kl_ref_tau else None
    fused, pad_id = head_is_plain(model), padding_id(tokenizer)
    return Trainer(cfg, model, optimizer, scheduler, device, pad_id, fused, Objective(cfg), reference)


def use_devices(plan: Plan) -> None:
    """The GPUs the launcher gives its trainer (none on a CPU deployment), before this process first uses CUDA; the
    server was spawned with its own."""
    trainer = plan.role("trainer")
    if "CUDA_VISIBLE_DEVICES" in trainer.env:
        os.environ["CUDA_VISIBLE_DEVICES"] = trainer.env["CUDA_VISIBLE_DEVICES"]


def trainer_step(trainer: Trainer, batch: Batch) -> dict[str, float]:
    """One optimizer step on the batch, in the trainer's turn on the device (colocated: the servers asleep)."""
    t = trainer
    with DeviceTurn(RunDir(t.cfg.run_dir).device_lock, is_colocated(t.cfg)):
        return train_step(
            t.cfg,
            t.model,
            t.optimizer,
            t.scheduler,
            batch,
            t.pad_id,
            t.device,
            fused_head=t.fused,
            objective=t.objective,
            reference=t.reference,
        )


def token_batch(trainer: Trainer, samples: list[Sample]) -> list[dict]:
    """What train_step collates from the samples: per part of the objective (a mode and its loss weights), its
    micro-batches and what their tokens hold."""
    t, vocab = trainer, decoder_and_head(trainer.model)[1].weight.shape[0]
    parts = []
    for mode_loss, share in t.objective.parts(samples):
        size = micro_batch_size(t.cfg, share, vocab, t.fused)
        mbs = micro_batches(share, size, t.pad_id, t.cfg.trainer.pack_tokens)
        loss = mode_loss.loss_cfg
        parts.append(
            {
                "mode": mode_loss.mode.name,
                "adv_tau": loss.adv_tau,
                "teacher_tau": loss.teacher_tau,
                "temperature": mode_loss.temperature,
                "samples": len(share),
                "micro_batches": len(mbs),
                "micro_batch_size": size,
                **token_counts(mbs),
            }
        )
    return parts


def token_counts(mbs: list[TokenBatch]) -> dict:
    """Rows and positions (padding too), the samples' tokens, the trained ones, and per stream (and the scorer's
    top k) the trained tokens that carry it."""
    trained = [mb.loss_mask.bool() for mb in mbs]
    streams = sorted({name for mb in mbs for name in mb.streams})
    return {
        "rows": sum(mb.input_ids.shape[0] for mb in mbs),
        "positions": sum(mb.input_ids.numel() for mb in mbs),
        "tokens": sum(int(mb.attention_mask.sum()) for mb in mbs),
        "trained_tokens": sum(int(m.sum()) for m in trained),
        "streams": {
            name: sum(int((mb.has_stream[name] & m).sum()) for mb, m in zip(mbs, trained) if name in mb.streams)
            for name in streams
        },
        "top_k_tokens": sum(
            int((mb.has_teacher_top & m).sum()) for mb, m in zip(mbs, trained) if mb.has_teacher_top is not None
        ),
    }
