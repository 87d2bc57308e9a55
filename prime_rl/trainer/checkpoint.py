"""Trainer checkpoints: checkpoints/step_N/ holds model + optimizer + scheduler state after N steps, published
whole (protocol/atomic.py's STABLE marker).

Sharded (torch distributed checkpoint): every rank writes its own shards of the model and the optimizer, so no
rank gathers them (at 8 B that would be ~100 GB on rank 0's CPU) and none reads more than its share on resume.
Tensors are saved by name with their global shapes, so a checkpoint resumes on any number of trainer processes
(one process included). The lr schedule, a few numbers, is `scheduler.json`.
"""

import contextlib
import json
import shutil
import warnings
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from prime_rl.protocol.atomic import STABLE_MARKER
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.distributed import SINGLE, World

SCHEDULER_FILE = "scheduler.json"


def save_checkpoint(run_dir: RunDir, step: int, model, optimizer, scheduler, keep: int, world: World = SINGLE) -> None:
    """Every rank must call it: each writes its shards, rank 0 the metadata, then publishes the directory."""
    final = run_dir.checkpoint(step)
    partial = final.with_name(f".{final.name}.partial")  # one name for every rank (temp_path's is per process)
    if world.main:
        shutil.rmtree(partial, ignore_errors=True)  # a killed attempt's leftover
    if world.size > 1:
        dist.barrier()  # nobody writes into it before it is clean
    model_state, optim_state = get_state_dict(model, optimizer)
    with one_process_is_intended(world):
        dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=partial)  # returns once all wrote
    if not world.main:
        return
    (partial / SCHEDULER_FILE).write_text(json.dumps(scheduler.state_dict()))
    (partial / STABLE_MARKER).touch()
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    for old in run_dir.steps_in("checkpoints")[:-keep]:
        shutil.rmtree(run_dir.checkpoint(old), ignore_errors=True)


def load_checkpoint(run_dir: RunDir, step: int, model, optimizer, scheduler, world: World = SINGLE) -> None:
    """This rank's share of the state at `step`, whatever number of ranks wrote it."""
    path = run_dir.checkpoint(step)
    model_state, optim_state = get_state_dict(model, optimizer)  # the shapes to fill, optimizer state included
    state = {"model": model_state, "optimizer": optim_state}
    with one_process_is_intended(world):
        dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    scheduler.load_state_dict(json.loads((path / SCHEDULER_FILE).read_text()))


def load_model_weights(path: Path, model) -> None:
    """The model's weights alone from the checkpoint at `path`, in one process (the optimizer's state is not read)."""
    state = {"model": get_model_state_dict(model)}
    with one_process_is_intended(SINGLE):
        dcp.load(state, checkpoint_id=path)
    set_model_state_dict(model, state["model"])


@contextlib.contextmanager
def one_process_is_intended(world: World):
    """Without a process group torch warns, at every checkpoint, that it assumes one process: here it is so."""
    with warnings.catch_warnings():
        if world.size == 1:
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
        yield
