"""Keeps the student server on a recent enough policy: waits for the trainer's weights and reloads them."""

import time

from prime_rl.config.schema import Config, num_nodes
from prime_rl.inference.client import InferenceClient
from prime_rl.protocol.handoff import Listener, fallback_s
from prime_rl.protocol.run_dir import RunDir

WEIGHTS_POLL_S = 0.05  # multi-node: how often the shared run dir is looked at for new weights


class PolicySync:
    def __init__(self, run_dir: RunDir, client: InferenceClient, lora_name: str | None, cfg: Config):
        self.run_dir = run_dir
        self.client = client
        self.lora_name = lora_name  # reload the adapter under this name instead of full weights
        self.wait_timeout_s = cfg.step_timeout_s
        self.fallback_s = fallback_s(num_nodes(cfg.deployment) > 1, WEIGHTS_POLL_S)  # the trainer announces exports
        self.listener = Listener(run_dir.handoff("weights"))
        self.version = -1  # nothing loaded yet: the trainer exports the starting weights as weights/step_<start>
        self.reload_s = 0.0  # time spent reloading, for the step's metrics
        self.wait_s = 0.0  # time spent waiting for the trainer's weights, for the step's metrics

    async def wait_for(self, needed: int) -> None:
        """Until the trainer has exported weights of step `needed` or newer."""

        def exported() -> bool:
            latest = self.run_dir.latest_weights()
            return latest is not None and latest >= needed

        start = time.monotonic()
        error = f"no weights for step {needed} after {self.wait_timeout_s:.0f}s; is the trainer alive?"
        await self.listener.wait_async(exported, self.wait_timeout_s, self.fallback_s, error)
        self.wait_s += time.monotonic() - start

    async def load_newest(self) -> int:
        """Serve the newest exported weights (after wait_for: there are some); returns their version."""
        latest = self.run_dir.latest_weights()  # weights only grow
        if latest > self.version:
            await self.load(latest)
        return self.version

    def take_times(self) -> dict[str, float]:
        times = {"time/reload": self.reload_s, "time/wait_weights": self.wait_s}
        self.reload_s = self.wait_s = 0.0
        return times

    async def load(self, step: int) -> None:
        start = time.monotonic()
        path = str(self.run_dir.weights(step).resolve())
        if self.lora_name:
            await self.client.load_lora(self.lora_name, path)
        else:
            await self.client.reload_weights(path)
        self.version = step
        self.reload_s += time.monotonic() - start
