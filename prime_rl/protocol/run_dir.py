"""The run directory: the only place where the processes of a run meet. Every path of the protocol is here."""

import json
import re
from pathlib import Path

from prime_rl.protocol.atomic import is_complete


class RunDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def rollouts(self, step: int) -> Path:
        """orchestrator -> trainer: the batch of `step` (batch.py)."""
        return self.root / "rollouts" / f"step_{step}.bin"

    def weights(self, step: int) -> Path:
        """trainer -> inference: the policy after `step` optimizer steps (safetensors, or a peft adapter)."""
        return self.root / "weights" / f"step_{step}"

    def push_requested(self, step: int) -> Path:
        """orchestrator -> trainer, inference.weight_transfer=nccl|gloo: the server is idle, push weights `step`
        (whose weights/step_N holds no files then, only the STABLE marker of the trainer having them)."""
        return self.weights(step) / "REQUESTED"

    def pushed(self, step: int) -> Path:
        """trainer -> orchestrator: the server serves weights `step`."""
        return self.weights(step) / "PUSHED"

    def handoff(self, channel: str) -> Path:
        """Where a `channel` ("batch", "weights", "push") is announced the moment it is whole: each waiter's named pipe
        is handoff/<channel>.<pid> (handoff.py)."""
        return self.root / "handoff" / channel

    @property
    def samples(self) -> Path:
        """orchestrator -> you: each step's first orchestrator.log_samples samples, as text and token ids."""
        return self.root / "samples.jsonl"

    @property
    def difficulty(self) -> Path:
        """orchestrator -> itself after a resume: each step's prompts the difficulty filter judged out of its band."""
        return self.root / "difficulty.jsonl"

    @property
    def device_lock(self) -> Path:
        """Colocated layout: held by whichever phase has the device (device_turn.py)."""
        return self.root / "device.lock"

    def checkpoint(self, step: int) -> Path:
        """trainer: model, optimizer and scheduler after `step` steps, for resume."""
        return self.root / "checkpoints" / f"step_{step}"

    def config(self, role: str) -> Path:
        """launcher -> every role: the resolved config the role reads."""
        return self.root / "configs" / f"{role}.yaml"

    def log(self, role: str, node_rank: int | None = None) -> Path:
        """logs/<role>.log; multi-node logs/<role>.node<rank>.log, since the nodes share the run dir."""
        return self.root / "logs" / (f"{role}.log" if node_rank is None else f"{role}.node{node_rank}.log")

    @property
    def metrics(self) -> Path:
        """trainer (a line per step) and orchestrator (the final evaluation) -> launcher, W&B, report."""
        return self.root / "metrics.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def merged(self) -> Path:
        """lora=on: the final model with the adapter merged in."""
        return self.root / "merged"

    @property
    def server_key(self) -> Path:
        """Multi-node: the run's server key, shared by every node's launcher (mode 0600)."""
        return self.root / "server_key"

    def server_url(self, role: str) -> Path:
        """launcher -> orchestrator: the URL a server of this node listens on, written once it serves (the server
        binds a port of the kernel's choosing, so only the launcher, reading it back, knows which)."""
        return self.root / "servers" / f"{role}.url"

    @property
    def self_teacher(self) -> Path:
        """orchestrator -> inference: a lagged self-teacher (modes.<name>.teacher=lagged), a copied adapter."""
        return self.root / "self_teacher"

    def server_restarts(self, role: str) -> Path:
        """launcher -> orchestrator: how often a server of this node was restarted in place, and whether its latest
        start serves yet (protocol/servers.py Restarts); absent until its first restart."""
        return self.root / "servers" / f"{role}.restarts"

    def outcome(self, node_rank: int | None = None) -> Path:
        """launcher -> tools, tests, the sweep report: how its last attempt ended (finished, failed: which role and
        why, stopped: by which signal); absent while it runs, or when the launcher was killed outright.
        Multi-node outcome.node<rank>.json, one per node's launcher."""
        return self.root / ("outcome.json" if node_rank is None else f"outcome.node{node_rank}.json")

    def read_outcome(self, node_rank: int | None = None) -> dict:
        """The recorded outcome (see `outcome`); {} where none was recorded."""
        path = self.outcome(node_rank)
        return json.loads(path.read_text()) if path.exists() else {}

    def end_marker(self, attempt: str) -> Path:
        """Multi-node: written once when this attempt of the run is over, by the head or a failing node."""
        return self.root / "nodes" / f"end.{attempt}"

    def earlier_run(self) -> list[str]:
        """What an earlier run left here that a new one would read as its own (only ckpt.resume may reuse it)."""
        return [name for name in ("metrics.jsonl", "rollouts", "weights", "checkpoints") if (self.root / name).exists()]

    def steps_in(self, folder: str) -> list[int]:
        """Step numbers of the `step_N` entries under a folder, ascending."""
        found = [re.fullmatch(r"step_(\d+)(\.bin)?", p.name) for p in (self.root / folder).glob("step_*")]
        return sorted(int(m.group(1)) for m in found if m)

    def weights_ready(self, step: int) -> bool:
        return is_complete(self.weights(step))

    def latest_weights(self) -> int | None:
        ready = [s for s in self.steps_in("weights") if self.weights_ready(s)]
        return ready[-1] if ready else None

    def checkpoints(self) -> list[int]:
        """The steps of the complete checkpoints, ascending."""
        return [s for s in self.steps_in("checkpoints") if is_complete(self.checkpoint(s))]

    def latest_checkpoint(self) -> int | None:
        done = self.checkpoints()
        return done[-1] if done else None
