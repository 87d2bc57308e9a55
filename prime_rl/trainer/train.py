"""The trainer's loop: wait for the step's batch, one optimizer step, export weights, log, checkpoint."""

import json
import resource
import time

import torch

from prime_rl.config.schema import Config, num_nodes
from prime_rl.config.user_error import UserError
from prime_rl.monitor.wandb_run import WandbRun
from prime_rl.protocol.batch import Batch, BatchFormatError, read_batch
from prime_rl.protocol.device_turn import DeviceTurn
from prime_rl.protocol.handoff import Listener, fallback_s
from prime_rl.protocol.metrics import append_row
from prime_rl.protocol.policy import policy_window
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.checkpoint import save_checkpoint
from prime_rl.trainer.distributed import close_world
from prime_rl.trainer.setup import Trainer, load_trainer
from prime_rl.trainer.step import train_step
from prime_rl.trainer.weights import export_merged, prune_weights

BATCH_POLL_S = 0.02  # multi-node: how often the shared run dir is looked at for the step's batch


def train(cfg: Config) -> None:
    t = load_trainer(cfg, resume=cfg.ckpt.resume)
    run_dir, world, start, weights, turn = RunDir(cfg.run_dir), t.world, t.start, t.weights, t.turn
    # W&B after the export (the orchestrator samples meanwhile), and from rank 0 alone: one writer per run.
    wandb_run = WandbRun(cfg, resumed=start > 0) if world.main else None
    batches = BatchWait(cfg)
    weights.push(start)
    last = time.monotonic()
    for step in range(start, cfg.max_steps):
        batch = batches.wait(step)
        with turn:
            metrics = train_step(t, batch)
            export_start = time.monotonic()
            weights.publish(step + 1)
            metrics["time/export"] = time.monotonic() - export_start
            if t.device.type == "cuda":
                metrics["memory/peak_gib"] = torch.cuda.max_memory_allocated(t.device) / 2**30  # this rank's
                torch.cuda.reset_peak_memory_stats(t.device)
                if turn.shared:
                    torch.cuda.empty_cache()  # the servers wake into this memory
            else:  # the process's high-water mark so far (Linux counts it in KiB)
                metrics["memory/peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        weights.push(step + 1)  # outside the turn: the orchestrator asks for a push from within its own
        if world.main:
            # every rank has read the batch: the step's all-reduces waited for all of them
            # the orchestrator is past step `step` now; one step of margin for a reload still in flight
            prune_weights(run_dir, keep_from=policy_window(step, cfg.orchestrator.max_async_level))
            run_dir.rollouts(step).unlink(missing_ok=True)
        step_s, last = time.monotonic() - last, time.monotonic()
        timing = {
            "time/step": step_s,
            "time/wait_batch": batches.take_wait_s(),
            "throughput/tokens_per_s": metrics["tokens"] / step_s,
            "batch/file_mib": batches.file_mib,  # what the orchestrator hands over each step (a top-k adds most)
        }
        row = {"step": step, **batch.metrics, **metrics, **timing, **weights.take_times()}
        if turn.shared:  # the hand-offs of the step: to the orchestrator for its batch, then to the trainer
            trainer_turn = turn.take_times()
            row["time/handoff"] = batch.metrics.get("time/handoff", 0.0) + trainer_turn["time/handoff"]
            row["time/wait_turn_trainer"] = trainer_turn["time/wait_turn"]
        if world.main:
            log_metrics(run_dir, row)
            wandb_run.log_step(row, batch.samples, t.tokenizer)
        done = step + 1
        if done == cfg.max_steps or (cfg.ckpt.interval and done % cfg.ckpt.interval == 0):
            ckpt_start = time.monotonic()
            save_checkpoint(run_dir, done, t.model, t.optimizer, t.scheduler, cfg.ckpt.keep, world)
            if world.main:
                print(f"checkpoint of step {done} written in {time.monotonic() - ckpt_start:.2f} s", flush=True)
    batches.listener.close()
    weights.close()
    if cfg.trainer.lora.enabled:
        export_merged_in_turn(t, turn, run_dir)
    if world.main:
        wandb_run.finish()
    close_world(world)


def export_merged_in_turn(t: Trainer, turn: DeviceTurn, run_dir: RunDir) -> None:
    """lora=on: the merged model, written in the trainer's turn on a shared device (the servers sleep meanwhile: the
    merge copies weights, with lora=embeddings a float32 vocabulary x hidden matrix)."""
    with turn:
        export_merged(t.model, t.tokenizer, run_dir.merged)
        if t.device.type == "cuda" and turn.shared:
            torch.cuda.empty_cache()


class BatchWait:
    """The trainer's wait for each step's batch: woken by the orchestrator's announcement (handoff.py)."""

    def __init__(self, cfg: Config):
        self.run_dir = RunDir(cfg.run_dir)
        self.timeout_s = cfg.step_timeout_s
        self.fallback_s = fallback_s(num_nodes(cfg.deployment) > 1, BATCH_POLL_S)  # the orchestrator announces batches
        self.listener = Listener(self.run_dir.handoff("batch"))
        self.wait_s = 0.0
        self.file_mib = 0.0  # the size of the last batch file read

    def wait(self, step: int) -> Batch:
        path = self.run_dir.rollouts(step)
        error = f"no batch for step {step} after {self.timeout_s:.0f}s (step_timeout_s); is the orchestrator alive?"
        start = time.monotonic()
        self.listener.wait(path.exists, self.timeout_s, self.fallback_s, error)
        self.wait_s += time.monotonic() - start
        self.file_mib = path.stat().st_size / 2**20
        try:
            return read_batch(path)
        except BatchFormatError as e:
            raise UserError(str(e)) from e

    def take_wait_s(self) -> float:
        wait, self.wait_s = self.wait_s, 0.0
        return wait


def log_metrics(run_dir: RunDir, metrics: dict) -> None:
    """One line per step in metrics.jsonl; the trainer is its only writer while the run trains."""
    append_row(run_dir.metrics, metrics)
    print(json.dumps(metrics), flush=True)
