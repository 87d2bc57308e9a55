"""The trainer in this process, set up as a run's (trainer/setup.py) on the plan's trainer devices, and the token
batch its `train_step` collates from the samples handed over in memory."""

import os

from prime_rl.launcher.plan import Plan
from prime_rl.protocol.batch import Sample
from prime_rl.trainer.data import TokenBatch, micro_batches
from prime_rl.trainer.model import decoder_and_head
from prime_rl.trainer.setup import Trainer
from prime_rl.trainer.step import micro_batch_size


def use_devices(plan: Plan) -> None:
    """The GPUs the launcher gives its trainer (none on a CPU deployment), before this process first uses CUDA; the
    server was spawned with its own."""
    trainer = plan.role("trainer")
    if "CUDA_VISIBLE_DEVICES" in trainer.env:
        os.environ["CUDA_VISIBLE_DEVICES"] = trainer.env["CUDA_VISIBLE_DEVICES"]


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
