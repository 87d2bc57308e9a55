"""The `vllm serve` command (run as the vLLM OpenAI server module) for the student or the teacher."""

import json
import os
import sys
from pathlib import Path

from prime_rl.config.layout import (
    SCORING_LOGITS_BYTES,
    is_colocated,
    pushes_weights,
    server_dtype,
    student_scores,
    teacher_gpu_share,
)
from prime_rl.config.modes import (
    RolloutSource,
    Scorer,
    SelfTeacher,
    context_margin,
    distill_top_k,
    self_teachers,
    source_modes,
    uses,
)
from prime_rl.config.schema import EPISODIC, VLLM_LORA_RANKS, Config
from prime_rl.inference import cpu_platform
from prime_rl.inference.entrypoint import SERVER_MODULE
from prime_rl.inference.server_auth import MIDDLEWARE

# vLLM's --worker-extension-cls: a path, so that the launcher does not import vLLM to name it
WEIGHT_RELOAD = "prime_rl.inference.weight_reload.WeightReload"
LOGITS_BYTES_PER_ENTRY = 8  # float32 logits and their float32 log-softmax
# vLLM's API-server defaults on GPUs below 70 GB and on H100/H200 (both above its max_num_seqs, which they must be)
MIN_BATCHED_TOKENS, MAX_BATCHED_TOKENS = 2048, 8192
# Every server's environment beside the run's: dev mode's routes (see the middleware below)
SERVER_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
# and a CPU server's (launcher/server_factory.py imports vLLM in it): one engine process per server (fast start, and a
# process-group kill takes all of it), forked, not spawned (~8 s less of a ~25 s start, cpu_platform.py)
CPU_SERVER_ENV = SERVER_ENV | {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", cpu_platform.ENV_VAR: "1"}


def student_context(cfg: Config) -> int:
    """The student server's --max-model-len: the modes may keep the student's sequences shorter than the context
    (a teacher scores them in a request for one token more)."""
    return cfg.inference.max_model_len - context_margin(cfg)


def vllm_command(
    cfg: Config, model: Path, served_name: str, port: int, gpus: list[str], lora_rank: int, student: bool
) -> tuple[list[str], dict[str, str]]:
    """(argv, env additions) of one vLLM server, the student's or a teacher's; `gpus` empty means the CPU build."""
    inf = cfg.inference
    on_gpu = bool(gpus)
    context = student_context(cfg) if student else inf.max_model_len
    argv = [sys.executable, "-m", SERVER_MODULE, "--model", str(model)]
    argv += ["--served-model-name", served_name, "--host", inf.host, "--port", str(port)]
    argv += ["--dtype", server_dtype(cfg, on_gpu), "--max-model-len", str(context), "--seed", str(cfg.seed)]
    # auto: CUDA graphs decode ~2-4x faster on a GPU; on a CPU eager is what this project measured
    eager = inf.enforce_eager if inf.enforce_eager is not None else not on_gpu
    if eager:
        argv.append("--enforce-eager")
    # Dev mode exposes collective_rpc (our reload_policy) and reset_prefix_cache for in-place weight updates;
    # the middleware puts them, like every other route, behind the run's key.
    argv += ["--middleware", MIDDLEWARE]
    # Weight updates go through our worker extension: exact for tied output layers too (weight_reload.py).
    argv += ["--worker-extension-cls", WEIGHT_RELOAD]
    # The Hugging Face files, as the trainer loads them: a model dir with a Mistral-format copy too
    # (consolidated*.safetensors, params.json) would make vLLM load that one, and tokenize with mistral-common.
    argv += ["--load-format", "safetensors", "--config-format", "hf", "--tokenizer-mode", "hf"]
    # Sampled tokens' logprobs as the sampler saw them (after temperature), the policy the trainer computes.
    argv += ["--logprobs-mode", "processed_logprobs"]
    if student and pushes_weights(cfg):
        # the trainer pushes each step's weights (weight_transfer/): vLLM's receiving engine, "gloo" ours
        argv += ["--weight-transfer-config", json.dumps({"backend": inf.weight_transfer.value})]
    if student:
        # Nothing but orchestrator.sampling shapes the student: by default vLLM applies a model's
        # generation_config.json (top_k, min_p, repetition penalty; Qwen3 ships top_k 20), a policy the trainer
        # would not reproduce. A teacher samples as its model's config recommends.
        argv += ["--generation-config", "vllm"]
    env = dict(SERVER_ENV)
    if on_gpu:
        # inference.tp/dp shape the student server; the teacher spreads over its own GPUs by tensor parallelism.
        tp, dp = (inf.tp, inf.dp) if student else (len(gpus), 1)
        share = inf.gpu_memory_utilization if student else teacher_gpu_share(cfg)
        argv += ["--tensor-parallel-size", str(tp), "--data-parallel-size", str(dp)]
        argv += ["--gpu-memory-utilization", str(share)]
        if not student or student_scores(cfg):
            limit = cfg.teacher.max_num_batched_tokens if not student else inf.max_num_batched_tokens
            argv += ["--max-num-batched-tokens", str(scoring_batched_tokens(limit, model))]
        if is_colocated(cfg):
            # /sleep gives the GPU to the trainer between generations, /wake_up takes it back (dev routes); the CUDA
            # graphs' memory goes to the host with the weights, else it stays on the GPU the trainer is using
            argv += ["--enable-sleep-mode", *([] if eager else ["--sleep-mode-offload-cudagraph"])]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    else:
        argv += ["--distributed-executor-backend", "uni", "--kv-cache-memory-bytes", str(inf.kv_cache_bytes)]
        env |= CPU_SERVER_ENV
        # A seeded request (the orchestrator sends none; a user's client may) whose prefill is split over engine
        # steps crashes the CPU engine ("CPU Generator does not use offset": vLLM rewinds the request's generator).
        argv.append("--no-enable-chunked-prefill")
        if is_colocated(cfg):
            # In turns the engine has every core while it generates: vLLM's CPU build otherwise keeps one core per
            # engine off its OpenMP threads, for processes that are idle here (one engine process, no scheduler).
            # A value exported to the launcher wins.
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    scorer = Scorer.self if student else Scorer.teacher
    if distill_top_k(cfg) and uses(cfg, lambda m: m.scorer == scorer):
        # the run's modes ask this server for its top k: vLLM returns at most --max-logprobs (20 by default)
        argv += ["--max-logprobs", str(distill_top_k(cfg))]
    parser = None if student else teacher_tool_parser(cfg)
    if parser:
        # the teacher's chat replies come back with their calls read out as `tool_calls`
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    if lora_rank:
        argv += ["--enable-lora", "--max-lora-rank", str(max_lora_rank(lora_rank))]
        if SelfTeacher.lagged in self_teachers(cfg):  # the live adapter and the lagged self-teacher's, both resident
            argv += ["--max-loras", "2"]
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return argv + list(inf.extra_args if student else cfg.teacher.extra_args), env


def max_lora_rank(rank: int) -> int:
    """vLLM's --max-lora-rank for an adapter of `rank`: vLLM takes only the ranks it lists, and serves an adapter of
    any rank up to it (the adapter keeps its own; the schema bounds `rank` by the largest)."""
    return next(allowed for allowed in VLLM_LORA_RANKS if allowed >= rank)


def teacher_tool_parser(cfg: Config) -> str | None:
    """The tool parser of a teacher that plays episodes (sft: gym, verifiers sources), None where it plays none."""
    played = (src for _, src, mode in source_modes(cfg) if mode.rollouts == RolloutSource.teacher)
    return next((src.tool_parser for src in played if src.name in EPISODIC), None)


def scoring_batched_tokens(limit: int, model: Path) -> int:
    """The --max-num-batched-tokens of a server that scores tokens (a teacher, opsd's student): `limit`
    (teacher.max_num_batched_tokens, inference.max_num_batched_tokens), or auto for 0. Prompt logprobs make vLLM
    build float32 [tokens, vocab] logits and their log-softmax outside its memory profile: at a 152 k vocabulary an
    8 k-token forward needs 10 GB beyond the server's share. Auto keeps them near SCORING_LOGITS_BYTES: the tokens
    that fit it, within vLLM's own defaults (at a 152 k vocabulary the floor, 2048 tokens: 2.3 GiB)."""
    if limit:
        return limit
    if not (model / "config.json").is_file():  # a built-in teacher not built yet: a vocabulary of a few hundred tokens
        return MAX_BATCHED_TOKENS
    vocab = vocab_size(model)
    fit = SCORING_LOGITS_BYTES // (vocab * LOGITS_BYTES_PER_ENTRY) // 256 * 256
    return min(max(fit, MIN_BATCHED_TOKENS), MAX_BATCHED_TOKENS)


def vocab_size(model: Path) -> int:
    """The output layer's size, from the model dir's config.json (vLLM's limit for logprobs per position)."""
    config = json.loads((model / "config.json").read_text())
    return config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")  # multimodal: text_config


# where vLLM reads a model's KV heads, in its order (ModelArchConfigConvertorBase.get_total_num_kv_heads)
KV_HEADS_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")


def attention_heads(model: Path) -> tuple[int, int]:
    """(attention heads, KV heads) from the model dir's config.json as vLLM reads them: a multimodal model's from its
    text_config, the KV heads as many as the attention heads where none are given (0: the config names none)."""
    config = json.loads((model / "config.json").read_text())
    text = config.get("text_config") or config
    heads = text.get("num_attention_heads") or 0
    return heads, next((text[key] for key in KV_HEADS_KEYS if text.get(key)), heads)


def tensor_parallel_fits(heads: int, kv_heads: int, tp: int) -> bool:
    """vLLM's split of the attention over `tp` GPUs: the heads evenly (ModelConfig.verify_with_parallel_config), the
    KV heads evenly or each replicated on tp / kv_heads GPUs (QKVParallelLinear)."""
    return heads % tp == 0 and (kv_heads % tp == 0 or tp % kv_heads == 0)
