"""A vLLM platform plugin (entry point group `vllm.platform_plugins`, setup.cfg): on the CPU servers the launcher
starts (it sets ENV_VAR in their environment), vLLM's CPU platform with a forked engine process
(forking_cpu_platform.py); any other vLLM on the machine resolves its platform as before. Imports no vLLM: the
launcher reads ENV_VAR from here, and vLLM calls `activate` in every process that resolves a platform."""

import os

ENV_VAR = "PRIME_RL_VLLM_CPU_FORK"  # "1": a CPU server the launcher started
PLATFORM = "prime_rl.inference.forking_cpu_platform.ForkingCpuPlatform"


def activate() -> str | None:
    """vLLM's platform detection: ours where the launcher asked for it, none (vLLM's own) elsewhere."""
    return PLATFORM if os.environ.get(ENV_VAR) == "1" else None
