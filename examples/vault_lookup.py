"""A `verifiers` (v1) taskset with a tool, for `task=verifiers`: the prompt names a key, the `get` tool of the
task's toolset returns the value stored under it, the reply must be that value. The value is never in the prompt,
so the reward is reachable only through the tool; the toolset's state counts the lookups, which the task's second
reward reads off the trace.

    PYTHONPATH=examples python launch.py task=verifiers task.env=vault_lookup task.max_turns=3

No Env of its own: verifiers' single-agent case, one turn in which the player calls the tools until it answers.
The built-in models warm-start on the built-in `lookup` task (`model.warm_start.task=lookup`), whose `get` tool this
one's mirrors (`TOOL_PREFIX = None`: the tool is `get`, not `vault_get`)."""

import difflib
import random
import string

import verifiers.v1 as vf


class VaultData(vf.TaskData):
    key: str  # the key the prompt names
    answer: str  # the value stored under it


class VaultState(vf.State):
    lookups: int = 0  # get() calls in the episode


class Vault(vf.Toolset[vf.ToolsetConfig, VaultState]):
    TOOL_PREFIX = None

    async def setup_task(self, data: VaultData) -> None:
        self.stored = {data.key: data.answer}

    @vf.tool
    async def get(self, key: str) -> str:
        """The value stored under a key."""
        self.state.lookups += 1
        return self.stored.get(key, f"no key {key}")


class VaultTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class VaultTask(vf.Task[VaultData, VaultState, VaultTaskConfig]):
    @classmethod
    def toolsets(cls, config: VaultTaskConfig) -> list[vf.Toolset]:
        return [Vault(config.tools)]

    @vf.reward(weight=0.8)
    async def value(self, trace: vf.Trace) -> float:
        """The reply's similarity to the value (1.0: exact)."""
        return difflib.SequenceMatcher(None, trace.last_reply.strip(), self.data.answer).ratio()

    @vf.reward(weight=0.2)
    async def looked_up(self, trace: vf.Trace) -> float:
        """Credit for asking the tool at all, read off the state its calls left."""
        return float(trace.state.lookups > 0)


class VaultConfig(vf.TasksetConfig):
    num_tasks: int = 20000  # keys generated
    seed: int = 0  # seed of the keys and values
    task: VaultTaskConfig = VaultTaskConfig()


class VaultTaskset(vf.Taskset[VaultTask, VaultConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        for _ in range(self.config.num_tasks):
            key, value = ("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 6))) for _ in range(2))
            yield VaultTask(VaultData(prompt=f"lookup: {key}", key=key, answer=value), self.config.task)


__all__ = ["VaultTaskset"]
