"""Before a resumed run starts: drop everything newer than the latest checkpoint, so it is recomputed once."""

import json
import shutil

from prime_rl.run_dir import RunDir


def prepare_resume(run_dir: RunDir) -> int:
    """Returns the step the run continues from (0 when there is no checkpoint)."""
    start = run_dir.latest_checkpoint() or 0
    for step in run_dir.steps_in("rollouts"):
        run_dir.rollouts(step).unlink(missing_ok=True)
    for step in run_dir.steps_in("weights"):
        shutil.rmtree(run_dir.weights(step), ignore_errors=True)
    if run_dir.metrics.exists():
        kept = [
            line
            for line in run_dir.metrics.read_text().splitlines()
            if _step_of(line) is not None and _step_of(line) < start
        ]
        run_dir.metrics.write_text("".join(line + "\n" for line in kept))
    return start


def _step_of(line: str):
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return None  # a torn last line from a killed writer
