"""The job's one W&B run, written by the trainer alone.

The trainer already merges the orchestrator's metrics (carried in each batch file) with its own into one
metrics.jsonl line per step, so logging that line gives one run on one step axis from one writer: no W&B
shared mode, no two processes racing to create or resume the same run id.
"""

import math
import uuid
from pathlib import Path

from omegaconf import OmegaConf

from prime_rl.config.evaluation import evaluates_at
from prime_rl.config.modes import mode_named
from prime_rl.config.schema import Config
from prime_rl.monitor.wandb_mode import wandb_mode
from prime_rl.protocol.batch import TEACHER_LOGPROBS, Sample
from prime_rl.protocol.metrics import read_rows
from prime_rl.protocol.polling import wait_until
from prime_rl.protocol.run_dir import RunDir

EVAL_STEP = "eval/step"  # the x-axis of the eval panels: the trainer steps that evaluated, and only those
RUN_ID_FILE = "wandb_run_id"  # in the run dir: a resumed or requeued job continues the same W&B run
ROW_POLL_S = 0.5  # how often metrics.jsonl is read while waiting for the final evaluation's line


def run_tags(cfg: Config) -> list[str]:
    lora, mode = "on" if cfg.trainer.lora.enabled else "off", mode_named(cfg.training_mode).name
    return [f"mode:{mode}", f"teacher:{cfg.teacher.kind.value}", f"lora:{lora}", *cfg.monitor.wandb.tags]


def logged_config(cfg: Config) -> dict:
    """The resolved config. It names the env var of the API key, never the key; header values are dropped
    all the same, in case someone put a credential under a name validation does not know."""
    config = OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)
    for teacher in [config["teacher"], *config["teachers"].values()]:
        teacher["headers"] = {name: "<redacted>" for name in teacher["headers"]}
    return config


def run_id(run_dir: Path, resumed: bool) -> str:
    """The id stored in the run dir when continuing from a checkpoint, else a new one (stored for next time).
    A run that restarts from step 0 gets a new id: W&B would drop its steps as already logged."""
    path = run_dir / RUN_ID_FILE
    if resumed and path.exists():
        return path.read_text().strip()
    new_id = uuid.uuid4().hex[:16]
    path.write_text(new_id + "\n")
    return new_id


class WandbRun:
    """Logs each trainer step (orchestrator + trainer metrics) at step=<trainer step>; a no-op when disabled."""

    def __init__(self, cfg: Config, resumed: bool):
        self.cfg = cfg
        self.run = None
        mode = wandb_mode(cfg.monitor.wandb.mode)
        if mode == "disabled":
            return
        import wandb  # only where it logs: a trainer with W&B off runs where wandb is not installed (a GPU node)

        w, run_dir = cfg.monitor.wandb, Path(cfg.run_dir)
        self.run = wandb.init(
            project=w.project,
            entity=w.entity,
            name=w.name,
            group=w.group,
            tags=run_tags(cfg),
            config=logged_config(cfg),
            id=run_id(run_dir, resumed),
            resume="allow",
            mode=mode,
            dir=run_dir,
        )
        define_axes(self.run)

    def log_step(self, metrics: dict, samples: list[Sample], tokenizer) -> None:
        if self.run is None:
            return
        step = metrics["step"]
        row = with_eval_step(metrics)
        interval = self.cfg.monitor.samples_interval
        if interval and step % interval == 0:
            row["samples"] = samples_table(samples[: self.cfg.monitor.num_samples], tokenizer)
        self.run.log(row, step=step)

    def finish(self) -> None:
        """Log the orchestrator's final evaluation, then close the run. The orchestrator appends that line
        (step = max_steps) to metrics.jsonl once the last weights are out, so the trainer waits for it
        here: the run stays one writer's, and W&B gets every line metrics.jsonl has."""
        if self.run is None:
            return
        if evaluates_at(self.cfg, 0):  # the orchestrator's own test for a final evaluation
            timeout_s = self.cfg.step_timeout_s
            try:
                final = wait_for_row(RunDir(self.cfg.run_dir).metrics, self.cfg.max_steps, timeout_s)
            except TimeoutError:
                print(f"no final evaluation in metrics.jsonl after {timeout_s:.0f}s; not in W&B", flush=True)
            else:
                self.run.log(with_eval_step(final), step=self.cfg.max_steps)
        self.run.finish()


def define_axes(run) -> None:
    """Train metrics stay on W&B's step, the trainer's; eval metrics get their own axis, so their panels join the
    evaluations instead of leaving gaps between them; the run's summary keeps the best and the last eval reward."""
    run.define_metric(EVAL_STEP, hidden=True)
    run.define_metric("eval/*", step_metric=EVAL_STEP)
    run.define_metric("eval/reward", step_metric=EVAL_STEP, summary="max,last")


def with_eval_step(metrics: dict) -> dict:
    """A metrics.jsonl line as W&B logs it: without its step (the log call's), with EVAL_STEP where it evaluated."""
    row = {k: v for k, v in metrics.items() if k != "step"}
    if any(k.startswith("eval/") for k in row):
        row[EVAL_STEP] = metrics["step"]
    return row


def wait_for_row(path: Path, step: int, timeout_s: float) -> dict:
    """The metrics.jsonl line of `step` (the final evaluation has no trainer step of its own); TimeoutError if
    none appears within timeout_s."""

    def row() -> dict | None:
        found = [r for r in read_rows(path) if r.get("step") == step]
        return found[-1] if found else None

    return wait_until(row, timeout_s, ROW_POLL_S, f"no line of step {step} in {path} after {timeout_s:.0f}s")


def samples_table(samples: list[Sample], tokenizer):
    """A wandb.Table of the rollouts as text with their reward and advantage; in opd also how likely the teacher
    found them."""
    import wandb

    columns = ["prompt", "completion", "reward", "advantage", "logprob_mean"]
    with_teacher = any(s.streams.get(TEACHER_LOGPROBS) for s in samples)
    if with_teacher:
        columns.append("teacher_logprob_mean")
    table = wandb.Table(columns=columns)
    for s in samples:
        prompt, completion = (
            tokenizer.decode(ids, skip_special_tokens=True) for ids in (s.prompt_ids, s.completion_ids)
        )
        teacher = [mean(s.streams.get(TEACHER_LOGPROBS))] if with_teacher else []
        table.add_data(prompt, completion, s.reward, s.advantage, mean(s.inference_logprobs), *teacher)
    return table


def mean(values: list[float] | None) -> float | None:
    """Mean over the completion's tokens; None where there are none (sft has no sampler logprobs)."""
    return math.fsum(values) / len(values) if values else None
