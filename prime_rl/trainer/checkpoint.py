"""Trainer checkpoints: checkpoints/step_N/ holds model + optimizer + scheduler state after N steps,
published whole (protocol/atomic.py).

One format for any number of trainer processes: the full (unsharded) state, optimizer keyed by parameter index.
"""

import shutil

import torch

from prime_rl.protocol.atomic import publish_dir
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.distributed import SINGLE, World, full_train_state, load_full_train_state


def save_checkpoint(run_dir: RunDir, step: int, model, optimizer, scheduler, keep: int, world: World = SINGLE) -> None:
    if world.size > 1:
        model_state, optim_state = full_train_state(model, optimizer)  # every rank gathers; rank 0 writes
    else:
        model_state, optim_state = model.state_dict(), optimizer.state_dict()
    if not world.main:
        return
    state = {"model": model_state, "optimizer": optim_state, "scheduler": scheduler.state_dict(), "step": step}
    publish_dir(run_dir.checkpoint(step), lambda out: torch.save(state, out / "trainer.pt"))
    for old in run_dir.steps_in("checkpoints")[:-keep]:
        shutil.rmtree(run_dir.checkpoint(old), ignore_errors=True)


def load_checkpoint(run_dir: RunDir, step: int, model, optimizer, scheduler, world: World = SINGLE) -> None:
    state = torch.load(run_dir.checkpoint(step) / "trainer.pt", weights_only=True)  # every rank reads the file
    if world.size > 1:
        load_full_train_state(model, optimizer, state["model"], state["optimizer"])
    else:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
