"""Before a resumed run starts: drop everything newer than the latest checkpoint, so it is recomputed once."""

import shutil

from prime_rl.config.user_error import UserError
from prime_rl.protocol.metrics import keep_rows_before
from prime_rl.protocol.run_dir import RunDir

UNSHARDED = "trainer.pt"  # the one file of full state that checkpoints held before they were sharded


def prepare_resume(run_dir: RunDir) -> int:
    """Returns the step the run continues from (0 when there is no checkpoint)."""
    start = run_dir.latest_checkpoint() or 0
    if start and (run_dir.checkpoint(start) / UNSHARDED).exists():  # checked before anything is trimmed
        raise UserError(
            f"checkpoints/step_{start} in {run_dir.root} has the unsharded format of earlier versions ({UNSHARDED}); "
            "fix: finish that run with the version that wrote it, or start a new run dir",
            ["ckpt.resume"],
        )
    for step in run_dir.steps_in("rollouts"):
        run_dir.rollouts(step).unlink(missing_ok=True)
    for step in run_dir.steps_in("weights"):
        shutil.rmtree(run_dir.weights(step), ignore_errors=True)
    for log in (run_dir.metrics, run_dir.samples, run_dir.difficulty):
        if log.exists():
            keep_rows_before(log, start)
    return start
