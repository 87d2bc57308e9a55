"""Keeps the student server on a recent enough policy: waits for the trainer's weights and reloads them."""

import time

from prime_rl.config.layout import pushes_weights
from prime_rl.config.schema import Config, num_nodes
from prime_rl.inference.client import InferenceClient
from prime_rl.protocol.atomic import write_text
from prime_rl.protocol.handoff import Listener, announce, fallback_s
from prime_rl.protocol.run_dir import RunDir

WEIGHTS_POLL_S = 0.05  # multi-node: how often the shared run dir is looked at for new weights


class PolicySync:
    def __init__(self, run_dir: RunDir, client: InferenceClient, lora_name: str | None, cfg: Config):
        self.run_dir = run_dir
        self.client = client
        self.lora_name = lora_name  # reload the adapter under this name instead of full weights
        self.pushed = pushes_weights(cfg)  # the trainer pushes them when asked
        self.wait_timeout_s = cfg.step_timeout_s
        self.fallback_s = fallback_s(num_nodes(cfg.deployment) > 1, WEIGHTS_POLL_S)  # the trainer announces exports
        self.listener = Listener(run_dir.handoff("weights"))
        self.version = -1  # nothing loaded yet: the trainer exports the starting weights as weights/step_<start>
        self.reload_s = 0.0  # time spent reloading, for the step's metrics
        self.wait_s = 0.0  # time spent waiting for the trainer's weights, for the step's metrics

    async def wait_for(self, needed: int) -> None:
        """Until the trainer has exported weights of step `needed` or newer (pushed: until the server has them)."""
        start = time.monotonic()
        error = f"no weights for step {needed} after {self.wait_timeout_s:.0f}s; is the trainer alive?"
        if self.pushed:
            # A pushing trainer holds its weights until they are asked for, so each version is taken as it comes:
            # waiting here, the server is idle anyway.
            while self.version < needed:
                await self.listener.wait_async(self.newer, self.wait_timeout_s, self.fallback_s, error)
                start += await self.load(self.run_dir.latest_weights())  # counted as reload time, not waiting
        else:
            await self.listener.wait_async(lambda: self.exported(needed), self.wait_timeout_s, self.fallback_s, error)
        self.wait_s += time.monotonic() - start

    def exported(self, version: int) -> bool:
        latest = self.run_dir.latest_weights()
        return latest is not None and latest >= version

    def newer(self) -> bool:
        return self.exported(self.version + 1)

    async def load_newest(self) -> int:
        """Serve the newest exported weights (after wait_for: there are some); returns their version."""
        if self.newer():  # weights only grow
            await self.load(self.run_dir.latest_weights())
        return self.version

    async def restore(self) -> str:
        """The student's server was restarted in place, with the starting weights: serve the policy it held (its
        export, or the newest where that one is pruned), as a step loads it; says which."""
        if self.version < 0:
            return "the starting weights, as before"
        step = self.version if self.run_dir.weights_ready(self.version) else self.run_dir.latest_weights()
        took = await self.load(step)
        return f"weights/step_{step} loaded in {took:.2f} s"

    def take_times(self) -> dict[str, float]:
        times = {"time/reload": self.reload_s, "time/wait_weights": self.wait_s}
        self.reload_s = self.wait_s = 0.0
        return times

    async def load(self, step: int) -> float:
        """Serve weights `step`; returns the seconds it took."""
        start = time.monotonic()
        path = str(self.run_dir.weights(step).resolve())
        if self.pushed:
            await self.ask_push(step)
        elif self.lora_name:
            await self.client.load_lora(self.lora_name, path)
        else:
            await self.client.reload_weights(path)
        self.version = step
        took = time.monotonic() - start
        self.reload_s += took
        return took

    async def ask_push(self, step: int) -> None:
        """inference.weight_transfer=nccl|gloo: the server is idle now (this process, its only client, awaits its
        requests before it loads), so the trainer may push weights `step`; until it has, nothing is generated."""
        write_text(self.run_dir.push_requested(step), "")
        announce(self.run_dir.handoff("push"))
        error = f"the trainer did not push weights {step} within {self.wait_timeout_s:.0f}s; is it alive?"
        await self.listener.wait_async(self.run_dir.pushed(step).exists, self.wait_timeout_s, self.fallback_s, error)
