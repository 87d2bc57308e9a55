"""Keeps the student server on a recent enough policy: waits for the trainer's weights and reloads them."""

import time

from prime_rl.inference.client import InferenceClient
from prime_rl.protocol.polling import wait_until_async
from prime_rl.protocol.run_dir import RunDir

WEIGHTS_POLL_S = 0.05  # how often the run dir is looked at for new weights


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

        def exported() -> bool:
            latest = self.run_dir.latest_weights()
            return latest is not None and latest >= needed

        error = f"no weights for step {needed} after {self.wait_timeout_s:.0f}s; is the trainer alive?"
        await wait_until_async(exported, self.wait_timeout_s, WEIGHTS_POLL_S, error)
        latest = self.run_dir.latest_weights()  # weights only grow: at least `needed`
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
