"""The run directory: the only place where the processes of a run meet (DESIGN.md §4)."""

import re
from pathlib import Path

STABLE = "STABLE"  # written last into weights/step_N: the export is complete


class RunDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def rollouts(self, step: int) -> Path:
        return self.root / "rollouts" / f"step_{step}.bin"

    def weights(self, step: int) -> Path:
        return self.root / "weights" / f"step_{step}"

    def weights_ready(self, step: int) -> bool:
        return (self.weights(step) / STABLE).exists()

    def checkpoint(self, step: int) -> Path:
        return self.root / "checkpoints" / f"step_{step}"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def merged(self) -> Path:
        """lora=on: the final model with the adapter merged in."""
        return self.root / "merged"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def steps_in(self, folder: str) -> list[int]:
        """Step numbers of the `step_N` entries under a folder, ascending."""
        found = [re.fullmatch(r"step_(\d+)(\.bin)?", p.name) for p in (self.root / folder).glob("step_*")]
        return sorted(int(m.group(1)) for m in found if m)

    def latest_weights(self) -> int | None:
        ready = [s for s in self.steps_in("weights") if self.weights_ready(s)]
        return ready[-1] if ready else None

    def latest_checkpoint(self) -> int | None:
        done = [s for s in self.steps_in("checkpoints") if (self.checkpoint(s) / "DONE").exists()]
        return done[-1] if done else None
