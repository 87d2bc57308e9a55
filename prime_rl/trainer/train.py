"""The trainer's loop: wait for the step's batch, one optimizer step, export weights, log, checkpoint."""

import json
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
from prime_rl.protocol.polling import wait_until
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.checkpoint import load_checkpoint, save_checkpoint
from prime_rl.trainer.distributed import close_world, init_world, shard_model
from prime_rl.trainer.loss import Objective
from prime_rl.trainer.model import compute_dtype, head_is_plain, load_model
from prime_rl.trainer.step import make_optimizer, train_step
from prime_rl.trainer.weights import export_merged, export_weights, prune_weights

BATCH_POLL_S = 0.02  # how often the run dir is looked at for the step's batch


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


def wait_for_batch(run_dir: RunDir, step: int, timeout_s: float) -> Batch:
    path = run_dir.rollouts(step)
    error = f"no batch for step {step} after {timeout_s:.0f}s (step_timeout_s); is the orchestrator alive?"
    wait_until(path.exists, timeout_s, BATCH_POLL_S, error)
    try:
        return read_batch(path)
    except BatchFormatError as e:
        raise UserError(str(e)) from e


def log_metrics(run_dir: RunDir, metrics: dict) -> None:
    """One line per step in metrics.jsonl; the trainer is its only writer while the run trains."""
    append_row(run_dir.metrics, metrics)
    print(json.dumps(metrics), flush=True)
