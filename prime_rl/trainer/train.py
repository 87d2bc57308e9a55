"""The trainer's loop: wait for the step's batch, one optimizer step, export weights, log, checkpoint."""

import json
import math
import time

import torch
from transformers.utils.logging import disable_progress_bar

from prime_rl.config.schema import Config
from prime_rl.config.user_error import UserError
from prime_rl.models.chat import padding_id
from prime_rl.monitor.wandb_run import WandbRun
from prime_rl.protocol.batch import Batch, BatchFormatError, read_batch
from prime_rl.protocol.metrics import append_row
from prime_rl.protocol.policy import policy_window
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.checkpoint import load_checkpoint, save_checkpoint
from prime_rl.trainer.data import micro_batches, to_device
from prime_rl.trainer.distributed import (
    SINGLE,
    World,
    all_sum,
    close_world,
    full_tensor,
    init_world,
    rank_micro_batches,
    shard_model,
)
from prime_rl.trainer.logprobs import head_logprobs, token_logprobs
from prime_rl.trainer.loss import metric_means
from prime_rl.trainer.lr_schedule import decay_factor
from prime_rl.trainer.model import compute_dtype, decoder_and_head, head_is_plain, load_model
from prime_rl.trainer.objective import Objective
from prime_rl.trainer.weights import export_merged, export_weights, prune_weights


def train(cfg: Config) -> None:
    disable_progress_bar()  # a bar per weight export would flood the log
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.trainer.num_threads)
    run_dir = RunDir(cfg.run_dir)
    world, device = init_world(cfg.trainer.device)  # a process group only under torchrun
    model, tokenizer = load_model(cfg, device)
    if world.size > 1:
        shard_model(model, compute_dtype(cfg, device))  # before the optimizer: it must hold the sharded parameters
    optimizer, scheduler = make_optimizer(cfg, model)
    # FSDP gathers the output layer only inside the model's forward: sharded, the logits come from the model
    fused = world.size == 1 and head_is_plain(model)
    start = (run_dir.latest_checkpoint() or 0) if cfg.ckpt.resume else 0
    if start:
        load_checkpoint(run_dir, start, model, optimizer, scheduler, world)
    export_weights(model, tokenizer, run_dir, start, world)
    # W&B after the export (the orchestrator samples meanwhile), and from rank 0 alone: one writer per run.
    wandb_run = WandbRun(cfg, resumed=start > 0) if world.main else None
    pad_id = padding_id(tokenizer)
    objective = Objective(cfg)
    last = time.monotonic()
    for step in range(start, cfg.max_steps):
        batch = wait_for_batch(run_dir, step, timeout_s=cfg.step_timeout_s)
        metrics = train_step(cfg, model, optimizer, scheduler, batch, pad_id, device, world, fused, objective)
        export_weights(model, tokenizer, run_dir, step + 1, world)
        if world.main:  # every rank has read the batch: the step's all-reduces waited for all of them
            # the orchestrator is past step `step` now; one step of margin for a reload still in flight
            prune_weights(run_dir, keep_from=policy_window(step, cfg.orchestrator.max_async_level))
            run_dir.rollouts(step).unlink(missing_ok=True)
        step_s, last = time.monotonic() - last, time.monotonic()
        timing = {"time/step": step_s, "throughput/tokens_per_s": metrics["tokens"] / step_s}
        row = {"step": step, **batch.metrics, **metrics, **timing}
        if world.main:
            log_metrics(run_dir, row)
            wandb_run.log_step(row, batch.samples, tokenizer)
        done = step + 1
        if done == cfg.max_steps or (cfg.ckpt.interval and done % cfg.ckpt.interval == 0):
            save_checkpoint(run_dir, done, model, optimizer, scheduler, cfg.ckpt.keep, world)
    if cfg.trainer.lora.enabled:
        export_merged(model, tokenizer, run_dir.merged)
    if world.main:
        wandb_run.finish()
    close_world(world)


def make_optimizer(cfg: Config, model):
    o = cfg.trainer.optim
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay)
    warmup = o.warmup_steps
    decay_steps = max(1, cfg.max_steps - warmup)

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / (warmup + 1)) * decay_factor(o.schedule, (step - warmup) / decay_steps)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return optimizer, scheduler


def wait_for_batch(run_dir: RunDir, step: int, timeout_s: float) -> Batch:
    path, deadline = run_dir.rollouts(step), time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no batch for step {step} after {timeout_s:.0f}s (step_timeout_s); is the orchestrator alive?"
            )
        time.sleep(0.02)
    try:
        return read_batch(path)
    except BatchFormatError as e:
        raise UserError(str(e)) from e


def train_step(
    cfg: Config,
    model,
    optimizer,
    scheduler,
    batch: Batch,
    pad_id: int,
    device,
    world: World = SINGLE,
    fused_head: bool = False,
    objective: Objective | None = None,
) -> dict:
    """One optimizer step on the batch. `fused_head`: the logprobs come straight from the final hidden states and
    the output layer (one process, a plain output layer: see policy_logprobs). `objective`: the run's loss (made
    from `cfg` when not given)."""
    start = time.monotonic()
    model.train()
    objective = objective or Objective(cfg)
    mbs = micro_batches(batch.samples, cfg.trainer.micro_batch_size, pad_id)
    step_loss = objective.for_step(mbs)  # sees the whole step, before it is split by rank
    if world.size > 1:
        mbs = rank_micro_batches(batch.samples, cfg.trainer.micro_batch_size, pad_id, world)
    # Divide by the step's tokens on all ranks: the summed gradients then equal one process's gradient.
    total_tokens = int(all_sum({"tokens": sum(mb.loss_mask.sum() for mb in mbs)}, world)["tokens"])
    sums = {"loss": 0.0, "entropy": 0.0}
    compute = compute_dtype(cfg, device)
    for mb in mbs:
        mb = to_device(mb, device)
        logprobs, entropy = policy_logprobs(model, mb, objective.temperature, compute, fused_head)
        loss, extra = step_loss(logprobs, mb, total_tokens=total_tokens)
        loss.backward()
        sums["loss"] += loss.item() * total_tokens
        sums["entropy"] += (entropy * mb.loss_mask).sum().item()
        for k, v in extra.items():
            sums[k] = sums.get(k, 0.0) + v
    grad_norm = float(full_tensor(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.optim.max_grad_norm)))
    sums = all_sum(sums, world)
    lr = scheduler.get_last_lr()[0]
    # A non-finite gradient (an overflow, a bad sample) would turn every weight it touches into NaN: skip the
    # update and its schedule step instead, and say so. The norm is the global one: every rank decides alike.
    finite = math.isfinite(grad_norm)
    if finite:
        optimizer.step()
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    train_s = time.monotonic() - start
    return {
        **metric_means(sums, total_tokens),
        "grad_norm": grad_norm if finite else float("nan"),
        "optim/skipped": 0.0 if finite else 1.0,
        "lr": lr,
        "time/train": train_s,
        "throughput/train_tokens_per_s": total_tokens / max(train_s, 1e-9),
        "tokens": total_tokens,
    }


def policy_logprobs(model, mb, temperature: float, compute: torch.dtype, fused_head: bool):
    """(token logprobs, entropy) of the micro-batch under the model at `temperature`, computed in `compute`. One
    process autocasts from the float32 weights (FSDP casts them itself, by its policy). With a plain output layer
    the logits are never built whole (head_logprobs); otherwise they come from the model (token_logprobs)."""
    autocast = torch.autocast(mb.input_ids.device.type, dtype=compute, enabled=compute != torch.float32)
    if fused_head:
        decoder, head = decoder_and_head(model)
        with autocast:
            hidden = decoder(input_ids=mb.input_ids, attention_mask=mb.attention_mask).last_hidden_state
        return head_logprobs(hidden.to(compute), head.weight, mb.input_ids, temperature)
    with autocast:
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
    return token_logprobs(logits, mb.input_ids, temperature)


def log_metrics(run_dir: RunDir, metrics: dict) -> None:
    """One line per step in metrics.jsonl; the trainer is its only writer while the run trains."""
    append_row(run_dir.metrics, metrics)
    print(json.dumps(metrics), flush=True)
