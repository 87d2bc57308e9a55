"""Keeps the student server on a recent enough policy: waits for the trainer's weights and reloads them."""

import asyncio
import time

from prime_rl.inference.client import InferenceClient
from prime_rl.protocol.run_dir import RunDir


class PolicySync:
    def __init__(self, run_dir: RunDir, client: InferenceClient, lora_name: str | None, wait_timeout_s: float):
        self.run_dir = run_dir
        self.client = client
        self.lora_name = lora_name  # reload the adapter under this name instead of full weights
        self.wait_timeout_s = wait_timeout_s
        self.version = -1  # nothing loaded yet: the trainer exports the starting weights as weights/step_<start>
        self.reload_s = 0.0  # time spent reloading, for the step's metrics

    async def ensure(self, needed: int) -> int:
        """Serve the newest exported weights, waiting until they are at least `needed`; returns the version."""
        deadline = time.monotonic() + self.wait_timeout_s
        latest = self.run_dir.latest_weights()
        while latest is None or latest < needed:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no weights for step {needed} after {self.wait_timeout_s:.0f}s; is the trainer alive?"
                )
            await asyncio.sleep(0.05)
            latest = self.run_dir.latest_weights()
        if latest > self.version:
            await self.load(latest)
        return self.version

    async def load(self, step: int) -> None:
        start = time.monotonic()
        path = str(self.run_dir.weights(step).resolve())
        if self.lora_name:
            await self.client.load_lora(self.lora_name, path)
        else:
            await self.client.reload_weights(path)
        self.version = step
        self.reload_s += time.monotonic() - start
