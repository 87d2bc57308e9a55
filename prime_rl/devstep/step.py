"""The run's first step in one process, stage by stage: read `one_step` top to bottom. The order is a launched run's:
the student's server starts, the trainer loads the student and publishes its starting weights, the orchestrator
loads them and makes the step's batch, the trainer trains on it (handed over in memory, not as a file)."""

import asyncio
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from prime_rl.config.modes import run_modes
from prime_rl.config.schema import Config
from prime_rl.devstep.orchestrator import orchestrator_step
from prime_rl.devstep.show import show_metrics, show_samples, show_token_batch, stage
from prime_rl.devstep.trainer import token_batch, use_devices
from prime_rl.launcher.server_handle import ROLE, command_plan, student_server
from prime_rl.models import student_dir
from prime_rl.trainer.setup import load_trainer
from prime_rl.trainer.step import train_step


def one_step(cfg: Config, json_path: Path | None, run_dir: Path | None, show: int) -> None:
    """One orchestrator step and one trainer step of the validated run `cfg`; what each stage made is printed, and
    written to `json_path` where given. `run_dir`: None for a temporary one, removed after a success."""
    console = Console(highlight=False)
    plan = command_plan(cfg, run_dir)  # the student built (once, then cached), the checks that need its tokenizer
    cfg = plan.config
    facts: dict = {"run_dir": str(plan.run_dir), "modes": [m.name for m in run_modes(cfg)]}
    facts["student"], times = str(student_dir(cfg)), facts.setdefault("times", {})

    stage(console, f"1 · the student's server (training_mode {'|'.join(facts['modes'])})")
    console.print(f"student {facts['student']}", soft_wrap=True)
    console.print(f"run dir {plan.run_dir}" + ("" if run_dir else " (temporary: removed after a success)"))
    console.print(" ".join(plan.role(ROLE).command), style="dim", soft_wrap=True)
    start = time.monotonic()
    with student_server(plan):
        times["server_s"] = time.monotonic() - start  # until it serves
        stage(console, "2 · the trainer loads the student, publishes weights/step_0")
        with timed(times, "trainer_load_s"):
            use_devices(plan)
            trainer = load_trainer(cfg)  # weights/step_0 published
        params = sum(p.numel() for p in trainer.model.parameters())
        console.print(f"{params:,} parameters on {trainer.device}; the fused output layer: {trainer.fused}")

        stage(console, "3 · one orchestrator step: rollouts, rewards, advantages, scores")
        with timed(times, "orchestrator_s"):
            batch, facts["samples"] = asyncio.run(orchestrator_step(cfg))
        facts["orchestrator_metrics"] = batch.metrics
        show_samples(console, facts["samples"], show)
        show_metrics(console, batch.metrics)

        stage(console, "4 · the trainer's token batch")
        facts["token_batch"] = token_batch(trainer, batch.samples)
        show_token_batch(console, facts["token_batch"])

        stage(console, "5 · one trainer step: what train_step returns")
        with timed(times, "trainer_s"), trainer.turn:  # the trainer's turn on the device (colocated: servers asleep)
            facts["trainer_metrics"] = train_step(trainer, batch)
        show_metrics(console, facts["trainer_metrics"])
    if json_path:
        json_path.write_text(json.dumps(facts, indent=1))
        console.print(f"facts written to {json_path}")
    if run_dir is None:
        shutil.rmtree(plan.run_dir)  # after a failure it stays, with the server's log


@contextmanager
def timed(times: dict[str, float], name: str) -> Iterator[None]:
    start = time.monotonic()
    yield
    times[name] = time.monotonic() - start
