"""The `vllm serve` command (run as the vLLM OpenAI server module) for the student or the teacher."""

import os
import sys
from pathlib import Path

from prime_rl.config.layout import is_colocated, teacher_gpu_share
from prime_rl.config.modes import mode_of
from prime_rl.config.schema import Config
from prime_rl.inference.server_auth import MIDDLEWARE

# vLLM's --worker-extension-cls: a path, so that the launcher does not import vLLM to name it
WEIGHT_RELOAD = "prime_rl.inference.weight_reload.WeightReload"


def vllm_command(
    cfg: Config, model: Path, served_name: str, port: int, gpus: list[str], lora_rank: int, student: bool
) -> tuple[list[str], dict[str, str]]:
    """(argv, env additions) of one vLLM server, the student's or a teacher's; `gpus` empty means the CPU build."""
    inf = cfg.inference
    on_gpu = bool(gpus)
    # the mode may keep the student's sequences shorter than the context (opd: the teacher scores one more token)
    margin = mode_of(cfg).context_margin if student else 0
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        served_name,
        "--host",
        inf.host,
        "--port",
        str(port),
        "--dtype",
        inf.dtype if inf.dtype != "auto" else ("bfloat16" if on_gpu else "float32"),
        "--max-model-len",
        str(inf.max_model_len - margin),
        "--seed",
        str(cfg.seed),
    ]
    if inf.enforce_eager:
        argv.append("--enforce-eager")
    # Dev mode exposes collective_rpc (our reload_policy) and reset_prefix_cache for in-place weight updates;
    # the middleware puts them, like every other route, behind the run's key.
    argv += ["--middleware", MIDDLEWARE]
    # Weight updates go through our worker extension: exact for tied output layers too (weight_reload.py).
    argv += ["--worker-extension-cls", WEIGHT_RELOAD]
    # Sampled tokens' logprobs as the sampler saw them (after temperature), the policy the trainer computes.
    argv += ["--logprobs-mode", "processed_logprobs"]
    if student:
        # Nothing but orchestrator.sampling shapes the student: by default vLLM applies a model's
        # generation_config.json (top_k, min_p, repetition penalty; Qwen3 ships top_k 20), a policy the trainer
        # would not reproduce. A teacher samples as its model's config recommends.
        argv += ["--generation-config", "vllm"]
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if on_gpu:
        # inference.tp/dp shape the student server; the teacher spreads over its own GPUs by tensor parallelism.
        tp, dp = (inf.tp, inf.dp) if student else (len(gpus), 1)
        share = inf.gpu_memory_utilization if student else teacher_gpu_share(cfg)
        argv += [
            "--tensor-parallel-size",
            str(tp),
            "--data-parallel-size",
            str(dp),
            "--gpu-memory-utilization",
            str(share),
        ]
        if is_colocated(cfg):
            # /sleep gives the GPU to the trainer between generations, /wake_up takes it back (dev routes)
            argv.append("--enable-sleep-mode")
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    else:
        argv += ["--distributed-executor-backend", "uni", "--kv-cache-memory-bytes", str(inf.kv_cache_bytes)]
        # One engine process per server: fast start, and a process-group kill takes all of it.
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        # A seeded request (the orchestrator sends none; a user's client may) whose prefill is split over engine
        # steps crashes the CPU engine ("CPU Generator does not use offset": vLLM rewinds the request's generator).
        argv.append("--no-enable-chunked-prefill")
        if is_colocated(cfg):
            # In turns the engine has every core while it generates: vLLM's CPU build otherwise keeps one core per
            # engine off its OpenMP threads, for processes that are idle here (one engine process, no scheduler).
            # A value exported to the launcher wins.
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    if lora_rank:
        argv += ["--enable-lora", "--max-lora-rank", str(lora_rank)]
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return argv + list(inf.extra_args), env
