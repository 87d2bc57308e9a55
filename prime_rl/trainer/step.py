"""One optimizer step of the trainer, shared by its loop (trainer/train.py) and by supervised fine-tuning in one
process (trainer/supervised.py): micro-batches, the mode's objective over chunked logprobs, AdamW with warmup and
schedule, gradient clipping, and the step's metrics."""

import math
import time

import torch

from prime_rl.config.schema import Config
from prime_rl.protocol.batch import Batch, Sample
from prime_rl.trainer.data import micro_batches, to_device
from prime_rl.trainer.distributed import all_max, all_sum, rank_micro_batches
from prime_rl.trainer.loss import SOURCE_METRICS, entropy_bonus, reference_kl
from prime_rl.trainer.model import compute_dtype, decoder_and_head, policy_logprobs
from prime_rl.trainer.setup import Trainer
from prime_rl.trainer.step_metrics import add, is_max, metric_means, step_sums
from prime_rl.weight_transfer.gather import full_tensor

AUTO_MICRO_BATCH = 64  # samples per micro-batch when the logits are never whole (the fused head)
WHOLE_LOGITS_BYTES = 4 << 30  # a micro-batch's whole logits and their gradient, when they are built whole
WHOLE_LOGITS_BYTES_PER_ENTRY = 4  # bf16 logits and their bf16 gradient


def train_step(t: Trainer, batch: Batch) -> dict:
    """One optimizer step of the trainer `t` on the batch."""
    start = time.monotonic()
    cfg, model, pad_id, device, world, objective = t.cfg, t.model, t.pad_id, t.device, t.world, t.objective
    model.train()
    vocab, pack = decoder_and_head(model)[1].weight.shape[0], cfg.trainer.pack_tokens
    work = []  # (the mode's loss, the loss of its micro-batches, one micro-batch of this rank)
    for mode_loss, samples in objective.parts(batch.samples):
        size = micro_batch_size(cfg, samples, vocab, t.fused)
        mbs = micro_batches(samples, size, pad_id, pack)
        step_loss = mode_loss.for_step(mbs)  # sees the mode's whole share of the step, before it is split by rank
        if world.size > 1:
            mbs = rank_micro_batches(samples, size, pad_id, world, pack)
        work += [(mode_loss, step_loss, mb) for mb in mbs]
    mbs = [mb for _, _, mb in work]
    # Divide by the step's tokens on all ranks: the summed gradients then equal one process's gradient.
    # a step may train on no token (every reply cut and masked: orchestrator.length.mask_truncated): it divides by
    # 1 and skips the update below, which Adam's momentum would otherwise make from zero gradients
    tokens, filled = sum(int(mb.loss_mask.sum()) for mb in mbs), sum(int(mb.attention_mask.sum()) for mb in mbs)
    counts = all_sum({"tokens": tokens, "filled": filled, "slots": sum(mb.input_ids.numel() for mb in mbs)}, world)
    trained = int(counts["tokens"])
    total_tokens = max(trained, 1)
    sums = {"loss": 0.0, "entropy": 0.0} | step_sums(batch.samples, SOURCE_METRICS)
    compute = compute_dtype(cfg, device)
    for mode_loss, step_loss, mb in work:
        mb = to_device(mb, device)
        out = policy_logprobs(model, mb, mode_loss.temperature, compute, t.fused)
        loss, extra = step_loss(out, mb, total_tokens=total_tokens)
        if objective.loss_cfg.entropy_tau:
            loss = loss + entropy_bonus(out.entropy, mb, objective.loss_cfg, total_tokens)
        if t.reference is not None:
            ref_logprobs = t.reference.logprobs(mb, mode_loss.temperature, compute, t.fused)
            kl = reference_kl(out.token, ref_logprobs) * mb.loss_mask
            loss = loss + objective.loss_cfg.kl_ref_tau * kl.sum() / total_tokens
            extra["kl_ref"] = kl.detach().sum().item()
        loss.backward()
        sums["loss"] += loss.item() * total_tokens
        sums["entropy"] += (out.entropy * mb.loss_mask).sum().item()
        add(sums, extra)
    grad_norm = float(full_tensor(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.optim.max_grad_norm)))
    maxima = {k: v for k, v in sums.items() if is_max(k)}
    sums = all_sum({k: v for k, v in sums.items() if not is_max(k)}, world) | all_max(maxima, world)
    lr = t.scheduler.get_last_lr()[0]
    # A non-finite gradient (an overflow, a bad sample) would turn every weight it touches into NaN: skip the
    # update and its schedule step instead, and say so. The norm is the global one: every rank decides alike.
    finite = math.isfinite(grad_norm)
    if finite and trained:
        t.optimizer.step()
        t.scheduler.step()
    t.optimizer.zero_grad(set_to_none=True)
    train_s = time.monotonic() - start
    return {
        **metric_means(sums, total_tokens),
        "grad_norm": grad_norm if finite else float("nan"),
        "optim/skipped": 0.0 if finite and trained else 1.0,
        "lr": lr,
        "time/train": train_s,
        "throughput/train_tokens_per_s": trained / max(train_s, 1e-9),
        # the forward pass's share of padding positions: what trainer.pack_tokens would save
        "throughput/padding_fraction": 1 - counts["filled"] / counts["slots"],
        "tokens": trained,
    }


def micro_batch_size(cfg: Config, samples: list[Sample], vocab: int, fused_head: bool) -> int:
    """trainer.micro_batch_size, or auto: the tokens of AUTO_MICRO_BATCH rows as wide as the step's longest sample
    (as many packed rows as hold them), fewer where the output layer is not fused (FSDP, an unusual head) and the
    [rows, width, vocab] logits and their gradient exist whole: at most WHOLE_LOGITS_BYTES of them (at 152 k vocab
    and 2 k tokens, 64 rows would be ~80 GB)."""
    if cfg.trainer.micro_batch_size:
        return cfg.trainer.micro_batch_size
    longest = max(s.length for s in samples)
    width = max(longest, cfg.trainer.pack_tokens)
    rows = max(1, AUTO_MICRO_BATCH * longest // width)
    if fused_head:
        return rows
    return max(1, min(rows, WHOLE_LOGITS_BYTES // (width * vocab * WHOLE_LOGITS_BYTES_PER_ENTRY)))
