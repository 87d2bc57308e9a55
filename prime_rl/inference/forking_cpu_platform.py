"""vLLM's CPU platform, its engine process forked from the API server instead of spawned (cpu_platform.py activates
it). Spawning re-imports vLLM and torch in the engine: ~8 s of each CPU server's ~25 s start. The API server runs
no OpenMP region before the engine starts (a fork after one could hang the engine's first), so the engine starts its
OpenMP threads as a spawned one does; tests/test_inference_vllm.py checks its logprobs against transformers."""

import os

from vllm.platforms.cpu import CpuPlatform


class ForkingCpuPlatform(CpuPlatform):
    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        super().check_and_update_config(vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"  # where CpuPlatform's own says spawn
