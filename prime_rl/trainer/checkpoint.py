"""Trainer checkpoints: checkpoints/step_N/ holds model + optimizer + scheduler state after N steps; DONE last."""

import shutil

import torch

from prime_rl.run_dir import RunDir


def save_checkpoint(run_dir: RunDir, step: int, model, optimizer, scheduler, keep: int) -> None:
    path = run_dir.checkpoint(step)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "step": step}, tmp / "trainer.pt")
    (tmp / "DONE").touch()
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    for old in run_dir.steps_in("checkpoints")[:-keep]:
        shutil.rmtree(run_dir.checkpoint(old), ignore_errors=True)


def load_checkpoint(run_dir: RunDir, step: int, model, optimizer, scheduler) -> None:
    state = torch.load(run_dir.checkpoint(step) / "trainer.pt", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
