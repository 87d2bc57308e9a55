"""Every cross-field rule of a run, checked before any process starts or job is submitted (README "Modes and
their rules"; docs/architecture.md, "Validation").

A broken rule raises ConfigError, whose one-line message names the offending keys and the fix;
the launcher (launcher/validation.py) prints it and exits with code 2.
"""

import os
from pathlib import Path
from urllib.parse import urlparse

from prime_rl.config.modes import mode_of
from prime_rl.config.schema import Config, TaskSourceConfig, TeacherKind, node_gpus, num_nodes
from prime_rl.config.user_error import ConfigError, check  # noqa: F401 (prime_rl.config imports ConfigError from here)
from prime_rl.models.hub import hub_model_problem, is_hub_id
from prime_rl.protocol.servers import SERVER_KEY_ENV

# Parts of header names that carry credentials (Authorization, X-Api-Key, X-Goog-Api-Key, Cookie, X-Auth-Token,
# …): their values belong in env vars (teacher.api_key_env, teacher.header_envs), never in a config file.
SECRET_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie", "session", "password", "credential")
# Chat request fields the orchestrator sets itself (teacher/chat_api.py): teacher.extra_body may not override them.
CHAT_FIELDS = ("model", "messages", "n", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stream")


def validate(cfg: Config, visible_gpus: int = 0) -> None:
    """Raise ConfigError on the first broken rule. `visible_gpus`: GPUs this process may use."""
    for rule in (_ranges, _mode, _teacher, _lora, _paths, _task, _nodes, _gpus, _parallel):
        rule(cfg, visible_gpus)


def _ranges(cfg: Config, _: int) -> None:
    o, t = cfg.orchestrator, cfg.trainer
    check(cfg.max_steps >= 1, ["max_steps"], f"must be >= 1, got {cfg.max_steps}", "set max_steps=100")
    check(cfg.step_timeout_s > 0, ["step_timeout_s"], "must be > 0", "use e.g. 3600 (an hour per step)")
    check(o.rollouts_per_example >= 1, ["orchestrator.rollouts_per_example"], "must be >= 1", "set it to 1 or more")
    check(
        o.batch_size >= 1 and o.batch_size % o.rollouts_per_example == 0,
        ["orchestrator.batch_size", "orchestrator.rollouts_per_example"],
        f"batch_size {o.batch_size} is not a positive multiple of rollouts_per_example {o.rollouts_per_example}",
        "make batch_size a multiple of rollouts_per_example",
    )
    check(o.max_async_level >= 0, ["orchestrator.max_async_level"], "must be >= 0", "use 0 (synchronous) or more")
    check(o.requests_per_step >= 1, ["orchestrator.requests_per_step"], "must be >= 1", "use e.g. 8")
    check(o.sampling.temperature >= 0, ["orchestrator.sampling.temperature"], "must be >= 0", "use e.g. 1.0")
    check(0 < o.sampling.top_p <= 1, ["orchestrator.sampling.top_p"], "must be in (0, 1]", "use e.g. 1.0")
    check(
        0 < o.sampling.max_tokens < cfg.inference.max_model_len,
        ["orchestrator.sampling.max_tokens", "inference.max_model_len"],
        "max_tokens must be positive and below max_model_len",
        "lower max_tokens or raise inference.max_model_len",
    )
    check(
        cfg.teacher.kind != TeacherKind.local_vllm or (cfg.teacher.max_tokens or 1) < cfg.inference.max_model_len,
        ["teacher.max_tokens", "inference.max_model_len"],
        "a local teacher's answers must fit its context: max_tokens must be below max_model_len",
        "lower teacher.max_tokens or raise inference.max_model_len",
    )
    check(o.eval.interval >= 0, ["orchestrator.eval.interval"], "must be >= 0", "use 0 to disable eval")
    check(o.eval.num_examples >= 1, ["orchestrator.eval.num_examples"], "must be >= 1", "use e.g. 64")
    check(o.eval.samples_per_prompt >= 1, ["orchestrator.eval.samples_per_prompt"], "must be >= 1", "use e.g. 4")
    check(o.verification.workers >= 1, ["orchestrator.verification.workers"], "must be >= 1", "use e.g. 2")
    check(o.verification.timeout_s > 0, ["orchestrator.verification.timeout_s"], "must be > 0", "use e.g. 10")
    check(t.optim.lr >= 0, ["trainer.optim.lr"], f"must be >= 0, got {t.optim.lr}", "use e.g. 3e-4")
    check(t.optim.max_grad_norm > 0, ["trainer.optim.max_grad_norm"], "must be > 0", "use e.g. 1.0")
    check(t.micro_batch_size >= 1, ["trainer.micro_batch_size"], "must be >= 1", "use e.g. 64")
    check(
        t.dtype in ("auto", "float32", "bfloat16"),
        ["trainer.dtype"],
        f"unknown compute dtype {t.dtype!r}",
        "use auto, float32 or bfloat16",
    )
    check(t.loss.adv_tau >= 0, ["trainer.loss.adv_tau"], "must be >= 0", "use 1.0, or 0 for pure distillation")
    check(t.loss.teacher_tau >= 0, ["trainer.loss.teacher_tau"], "must be >= 0", "use a value > 0 in opd, 0 else")
    check(t.loss.kl_tau >= 0, ["trainer.loss.kl_tau"], "must be >= 0", "use 0 to disable")
    check(t.loss.mask_band > 0, ["trainer.loss.mask_band"], "must be > 0", "use e.g. 0.2")
    check(
        0 <= t.loss.ratio_low <= 1 <= t.loss.ratio_high,
        ["trainer.loss.ratio_low", "trainer.loss.ratio_high"],
        f"the ratio band [{t.loss.ratio_low}, {t.loss.ratio_high}] must contain 1 (an on-policy token)",
        "use e.g. ratio_low=0.5 ratio_high=5",
    )
    check(cfg.ckpt.interval >= 0, ["ckpt.interval"], "must be >= 0", "use 0 to checkpoint only at the end")
    check(cfg.ckpt.keep >= 1, ["ckpt.keep"], "must be >= 1 (the newest checkpoint is always kept)", "use e.g. 2")
    for key, port in (("inference.port", cfg.inference.port), ("teacher.port", cfg.teacher.port)):
        check(0 <= port <= 65535, [key], f"{port} is not a port", "use 0 to pick a free port")
    _more_ranges(cfg)


def _more_ranges(cfg: Config) -> None:
    """Knobs with a simple range: a wrong value would otherwise fail deep in a process, mid-run."""
    o, t, inf, teacher, ws = cfg.orchestrator, cfg.trainer, cfg.inference, cfg.teacher, cfg.model.warm_start
    ranges = [  # (key, value, holds, what it must be, an example)
        ("orchestrator.eval.temperature", o.eval.temperature, o.eval.temperature >= 0, ">= 0", "0 (greedy) or 1.0"),
        ("orchestrator.request_timeout_s", o.request_timeout_s, o.request_timeout_s > 0, "> 0", "120"),
        ("orchestrator.max_retries", o.max_retries, o.max_retries >= 0, ">= 0", "3"),
        ("teacher.request_timeout_s", teacher.request_timeout_s, teacher.request_timeout_s > 0, "> 0", "120"),
        ("teacher.max_retries", teacher.max_retries, teacher.max_retries >= 0, ">= 0", "5"),
        ("teacher.max_concurrency", teacher.max_concurrency, teacher.max_concurrency >= 1, ">= 1", "32"),
        (
            "teacher.max_tokens",
            teacher.max_tokens,
            teacher.max_tokens is None or teacher.max_tokens >= 1,
            ">= 1",
            "256",
        ),
        ("trainer.optim.beta1", t.optim.beta1, 0 <= t.optim.beta1 < 1, "in [0, 1)", "0.9"),
        ("trainer.optim.beta2", t.optim.beta2, 0 <= t.optim.beta2 < 1, "in [0, 1)", "0.98"),
        ("trainer.optim.warmup_steps", t.optim.warmup_steps, t.optim.warmup_steps >= 0, ">= 0", "10"),
        ("inference.kv_cache_bytes", inf.kv_cache_bytes, inf.kv_cache_bytes > 0, "> 0", "67108864"),
        (
            "inference.gpu_memory_utilization",
            inf.gpu_memory_utilization,
            0 < inf.gpu_memory_utilization <= 1,
            "in (0, 1]",
            "0.9",
        ),
        ("model.warm_start.steps", ws.steps, ws.steps >= 0, ">= 0 (0 = random init)", "80"),
        ("model.warm_start.batch_size", ws.batch_size, ws.batch_size >= 1, ">= 1", "64"),
        ("model.warm_start.warmup_steps", ws.warmup_steps, ws.warmup_steps >= 0, ">= 0", "20"),
        ("monitor.samples_interval", cfg.monitor.samples_interval, cfg.monitor.samples_interval >= 0, ">= 0", "10"),
        ("monitor.num_samples", cfg.monitor.num_samples, cfg.monitor.num_samples >= 0, ">= 0", "16"),
        ("launcher.ready_timeout_s", cfg.launcher.ready_timeout_s, cfg.launcher.ready_timeout_s > 0, "> 0", "300"),
        ("launcher.stop_grace_s", cfg.launcher.stop_grace_s, cfg.launcher.stop_grace_s >= 0, ">= 0", "5"),
    ]
    for key, value, holds, must, example in ranges:
        check(holds, [key], f"must be {must}, got {value}", f"use e.g. {example}")
    tiny = cfg.model.tiny
    sizes = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size")
    for name in sizes:
        check(getattr(tiny, name) >= 1, [f"model.tiny.{name}"], "must be >= 1", "use the default or a larger value")
    check(
        tiny.hidden_size % tiny.num_heads == 0 and tiny.num_heads % tiny.num_kv_heads == 0,
        ["model.tiny.hidden_size", "model.tiny.num_heads", "model.tiny.num_kv_heads"],
        "hidden_size must be a multiple of num_heads, and num_heads of num_kv_heads",
        "use e.g. hidden_size=128 num_heads=4 num_kv_heads=2",
    )


def _mode(cfg: Config, _: int) -> None:
    """The rules a mode's facts (config/modes.py) imply for the rest of the config."""
    mode, loss, teacher = mode_of(cfg), cfg.trainer.loss, cfg.teacher.kind
    name, verification = mode.name.value, cfg.orchestrator.verification.enabled
    if mode.trains_sampled_policy:
        _sampling_policy(cfg)
    if mode.teacher:
        check(
            teacher != TeacherKind.none,
            ["training_mode", "teacher"],
            f"{name} needs a teacher",
            "add teacher=local_vllm or teacher=external",
        )
    else:
        check(
            teacher == TeacherKind.none,
            ["training_mode", "teacher"],
            f"{name} takes no teacher, got teacher={teacher.value}",
            "use teacher=none, or training_mode=opd|sft to learn from a teacher",
        )
    if mode.teacher_term:
        check(
            loss.teacher_tau > 0,
            ["trainer.loss.teacher_tau"],
            f"{name} needs teacher_tau > 0",
            "set trainer.loss.teacher_tau=1.0",
        )
    else:
        check(
            loss.teacher_tau == 0,
            ["trainer.loss.teacher_tau", "training_mode"],
            f"teacher_tau={loss.teacher_tau} only applies in opd",
            "set trainer.loss.teacher_tau=0 or training_mode=opd",
        )
    if mode.needs_rewards:
        check(
            verification,
            ["orchestrator.verification.enabled", "training_mode"],
            f"{name} learns from rewards, so verification must be on",
            "set orchestrator.verification.enabled=true",
        )
    if mode.uses_advantages:
        check(
            verification or loss.adv_tau == 0,
            ["trainer.loss.adv_tau", "orchestrator.verification.enabled"],
            f"adv_tau={loss.adv_tau} needs rewards but verification is off",
            "set trainer.loss.adv_tau=0 (pure distillation) or orchestrator.verification.enabled=true",
        )
        check(
            loss.adv_tau == 0 or cfg.orchestrator.rollouts_per_example > 1,
            ["trainer.loss.adv_tau", "orchestrator.rollouts_per_example"],
            f"adv_tau={loss.adv_tau} weighs GRPO advantages, which are always 0 with one rollout per prompt",
            "set orchestrator.rollouts_per_example=2 or more, or trainer.loss.adv_tau=0 (pure distillation)",
        )


def _sampling_policy(cfg: Config) -> None:
    """rl and opd train the policy that sampled: the trainer reproduces its temperature, not a truncation."""
    s, mode = cfg.orchestrator.sampling, cfg.training_mode.value
    check(
        s.temperature > 0,
        ["orchestrator.sampling.temperature", "training_mode"],
        f"{mode} trains on sampled rollouts; at temperature 0 every rollout of a prompt is the same",
        "use e.g. orchestrator.sampling.temperature=1.0 (greedy evaluation: orchestrator.eval.temperature=0)",
    )
    check(
        s.top_p == 1,
        ["orchestrator.sampling.top_p", "training_mode"],
        f"top_p={s.top_p} truncates the sampling policy, which {mode} training does not reproduce",
        "set orchestrator.sampling.top_p=1.0 (lower the temperature instead)",
    )


def _teacher(cfg: Config, _: int) -> None:
    t, kind = cfg.teacher, cfg.teacher.kind
    if kind == TeacherKind.none:
        return
    check(bool(t.model), ["teacher.model"], f"teacher={kind.value} needs a model", "set teacher.model=…")
    if kind == TeacherKind.external:
        url = urlparse(t.base_url or "")
        check(
            url.scheme in ("http", "https") and bool(url.netloc),
            ["teacher.base_url"],
            f"{t.base_url!r} is not an http(s) URL",
            "set teacher.base_url=https://host/v1",
        )
        check(
            cfg.deployment.num_teacher_gpus is None,
            ["deployment.num_teacher_gpus", "teacher"],
            "an external teacher runs elsewhere and gets no local GPUs",
            "drop deployment.num_teacher_gpus or use teacher=local_vllm",
        )
        check(
            t.api_key_env != SERVER_KEY_ENV,
            ["teacher.api_key_env"],
            f"{SERVER_KEY_ENV} holds the run's own server key, which the launcher sets for its children",
            "keep the teacher's key in another env var, e.g. teacher.api_key_env=OPENAI_API_KEY",
        )
        if t.api_key_env:
            check(
                bool(os.environ.get(t.api_key_env)),
                ["teacher.api_key_env"],
                f"environment variable {t.api_key_env} (the teacher's API key) is not set",
                f"export {t.api_key_env}=<key> before launching",
            )
        for name, env in t.header_envs.items():
            check(
                env != SERVER_KEY_ENV and bool(os.environ.get(env)),
                [f"teacher.header_envs.{name}"],
                f"environment variable {env} (the value of header {name}) is not set"
                if env != SERVER_KEY_ENV
                else f"{SERVER_KEY_ENV} holds the run's own server key",
                f"export {env}=<value> before launching, or name another variable",
            )
    _teacher_requests(cfg)
    leaked = sorted(h for h in t.headers if any(word in h.lower() for word in SECRET_HEADER_WORDS))
    check(
        not leaked,
        [f"teacher.headers.{h}" for h in leaked],
        "a credential in teacher.headers would be written to config dumps",
        f"put its value in an env var and set +teacher.header_envs.{leaked[0] if leaked else '<name>'}=<VAR>",
    )


def _teacher_requests(cfg: Config) -> None:
    """How the teacher is asked: limits, prices, and provider fields that leave our own alone."""
    t, s = cfg.teacher, cfg.orchestrator.sampling
    check(t.max_concurrency >= 1, ["teacher.max_concurrency"], "must be >= 1", "use e.g. 32")
    check(t.rate_limit_wait_s >= 0, ["teacher.rate_limit_wait_s"], "must be >= 0", "use e.g. 600")
    check(
        t.price_per_mtok_in >= 0 and t.price_per_mtok_out >= 0,
        ["teacher.price_per_mtok_in", "teacher.price_per_mtok_out"],
        "prices must be >= 0",
        "give the provider's USD price per million tokens",
    )
    ours = sorted(set(t.extra_body) & set(CHAT_FIELDS))
    check(
        not ours,
        [f"teacher.extra_body.{k}" for k in ours],
        "the orchestrator sets this request field itself",
        "set it through orchestrator.sampling, rollouts_per_example or teacher.api instead",
    )
    evaluation = cfg.orchestrator.eval.temperature if cfg.orchestrator.eval.interval else 1.0
    check(
        t.api.sampling_params is not False or (s.temperature, s.top_p, evaluation) == (1.0, 1.0, 1.0),
        ["teacher.api.sampling_params", "orchestrator.sampling.temperature", "orchestrator.eval.temperature"],
        f"an endpoint that takes no sampling settings samples at temperature 1 and top_p 1, not "
        f"{s.temperature:g} (eval {evaluation:g}) and {s.top_p:g}",
        "set orchestrator.sampling.temperature=1 orchestrator.eval.temperature=1 orchestrator.sampling.top_p=1",
    )
    if t.cache_dir:
        cache = Path(t.cache_dir).expanduser().absolute()
        existing = next(d for d in (cache, *cache.parents) if d.exists())
        check(
            existing.is_dir() and os.access(existing, os.W_OK),
            ["teacher.cache_dir"],
            f"{existing} is not a writable directory",
            "point teacher.cache_dir at a directory you can write (shared by the jobs that should reuse answers)",
        )
    check(
        not urlparse(t.base_url or "").password,
        ["teacher.base_url"],
        "a password in the URL would be written to config dumps",
        "drop it from the URL and put the key in the env var named by teacher.api_key_env",
    )


def _lora(cfg: Config, _: int) -> None:
    lora = cfg.trainer.lora
    if not lora.enabled:
        return
    check(lora.rank >= 1, ["trainer.lora.rank"], "must be >= 1", "use e.g. 8")
    check(lora.alpha > 0, ["trainer.lora.alpha"], "must be > 0", "use e.g. 16")
    check(bool(lora.target_modules), ["trainer.lora.target_modules"], "is empty", "list modules, e.g. [q_proj,v_proj]")
    check(
        lora.dropout == 0 or not mode_of(cfg).trains_sampled_policy,
        ["trainer.lora.dropout", "training_mode"],
        "must be 0 in rl and opd: with dropout the trainer's policy is not the one vLLM sampled from",
        "set trainer.lora.dropout=0 (dropout regularises sft only)",
    )


def _paths(cfg: Config, _: int) -> None:
    _model(cfg.model.name, cfg.model.revision, "model.name", "model.revision")
    if cfg.teacher.kind == TeacherKind.local_vllm:
        _model(cfg.teacher.model, cfg.teacher.revision, "teacher.model", "teacher.revision")


def _task(cfg: Config, _: int) -> None:
    """The task builds as configured: its data reads and has the columns named, its generator takes the options,
    its verifier imports. Built here once, so a mistake is one line before anything starts."""
    from prime_rl.tasks.registry import MIX, SOURCE_KINDS, TASK_KINDS, check_data_key, train_sizes

    task = cfg.task
    check(
        task.name in TASK_KINDS, ["task.name"], f"unknown task {task.name!r}", f"use task={' | task='.join(TASK_KINDS)}"
    )
    sources = [(f"task.mix[{i}]", src) for i, src in enumerate(task.mix)] if task.name == MIX else [("task", task)]
    check(bool(sources), ["task.mix"], "task=mix has no sources", "list them: task.mix=[{name:reverse},{name:sort}]")
    for key, src in sources:
        check(
            src.name in SOURCE_KINDS,
            [f"{key}.name"],
            f"unknown task {src.name!r}",
            f"use one of {', '.join(SOURCE_KINDS)}",
        )
        check(src.weight > 0, [f"{key}.weight"], "must be > 0", "give each source a positive weight")
        check_data_key(key, src)
    sizes = train_sizes(task)
    # a step draws its prompts without replacement, from one source in a mix (a step may draw all from one)
    per_step = cfg.orchestrator.batch_size // cfg.orchestrator.rollouts_per_example
    for (key, src), size in zip(sources, sizes):
        check(
            size >= per_step,
            [_size_key(key, src), "orchestrator.batch_size"],
            f"{size} train prompts, fewer than the {per_step} a step draws (batch_size / rollouts_per_example)",
            "give the task more train prompts (more rows, or fewer held out by num_eval) or lower the batch_size",
        )


def _size_key(key: str, src: TaskSourceConfig) -> str:
    """The knob that sets a source's train size: its data (hf, jsonl) or its num_train."""
    return f"{key}.path" if src.name in ("hf", "jsonl") else f"{key}.num_train"


def _model(name: str, revision: str | None, key: str, revision_key: str) -> None:
    """'tiny', a local model dir, or a Hub id that is in the Hugging Face cache or on the Hub."""
    if name == "tiny":
        return
    if not is_hub_id(name):
        check(
            (Path(name).expanduser() / "config.json").is_file(),
            [key],
            f"{name!r} is neither 'tiny', a local Hugging Face model dir (no config.json) nor a Hub id",
            f"use {key}=tiny, a path to a saved model, or a Hub id like Qwen/Qwen3-0.6B",
        )
        return
    problem = hub_model_problem(name, revision)
    check(
        problem is None,
        [key, revision_key] if revision else [key],
        f"{name!r} is no local model dir, and as a Hub id: {problem}",
        "download it where the cache is shared (hf download <id>), unset HF_HUB_OFFLINE, or fix the id",
    )


def _gpus(cfg: Config, visible_gpus: int) -> None:
    d = cfg.deployment
    counts = {"deployment.num_infer_gpus": d.num_infer_gpus, "deployment.num_train_gpus": d.num_train_gpus}
    if d.num_teacher_gpus is not None:
        counts["deployment.num_teacher_gpus"] = d.num_teacher_gpus
        check(
            cfg.teacher.kind == TeacherKind.local_vllm,
            ["deployment.num_teacher_gpus", "teacher"],
            f"GPUs for a teacher server, but teacher={cfg.teacher.kind.value} starts none",
            "drop deployment.num_teacher_gpus or use teacher=local_vllm",
        )
    for key, n in counts.items():
        check(n >= 0, [key], f"must be >= 0, got {n}", "use 0 for CPU")
    if d.num_infer_gpus > 0 and cfg.teacher.kind == TeacherKind.local_vllm:
        check(
            bool(d.num_teacher_gpus),
            ["deployment.num_teacher_gpus"],
            "a GPU deployment with teacher=local_vllm needs GPUs for the teacher server",
            "set deployment.num_teacher_gpus=1",
        )
    asked = node_gpus(d)  # multi-node: each node sees its own GPUs
    check(
        asked <= visible_gpus,
        list(counts),
        f"{asked} GPUs asked{' per node' if num_nodes(d) > 1 else ''} but {visible_gpus} visible",
        "lower the GPU counts or set CUDA_VISIBLE_DEVICES to more devices",
    )


def _parallel(cfg: Config, _: int) -> None:
    d, t, inf = cfg.deployment, cfg.trainer, cfg.inference
    check(t.num_procs >= 1, ["trainer.num_procs"], f"must be >= 1, got {t.num_procs}", "use 1, or more on CPU")
    if d.num_train_gpus > 0:
        check(
            t.num_procs in (1, d.num_train_gpus),
            ["trainer.num_procs", "deployment.num_train_gpus"],
            f"num_procs={t.num_procs} but on GPUs the trainer runs one process per GPU ({d.num_train_gpus})",
            "drop trainer.num_procs and set deployment.num_train_gpus",
        )
    procs_key = "deployment.num_train_gpus" if d.num_train_gpus > 0 else "trainer.num_procs"
    check(
        not t.lora.enabled or max(d.num_train_gpus, t.num_procs) * max(d.num_train_nodes, 1) == 1,
        ["trainer.lora.enabled", procs_key],
        "LoRA trains in one trainer process only (no FSDP sharding of peft adapters yet)",
        f"use lora=off, or {procs_key}=1",
    )
    for key, n in (("inference.tp", inf.tp), ("inference.dp", inf.dp)):
        check(n >= 1, [key], f"must be >= 1, got {n}", "use 1 or more")
    if d.num_infer_gpus > 0:
        check(
            inf.tp * inf.dp == d.num_infer_gpus,
            ["inference.tp", "inference.dp", "deployment.num_infer_gpus"],
            f"tp={inf.tp} x dp={inf.dp} = {inf.tp * inf.dp} GPUs but the student server has {d.num_infer_gpus}",
            "make inference.tp * inference.dp equal deployment.num_infer_gpus",
        )
    else:
        check(
            inf.tp == 1 and inf.dp == 1,
            ["inference.tp", "inference.dp"],
            f"tp={inf.tp}, dp={inf.dp}: the CPU server (deployment.num_infer_gpus=0) runs one process",
            "use inference.tp=1 inference.dp=1, or set deployment.num_infer_gpus",
        )


def _nodes(cfg: Config, _: int) -> None:
    d = cfg.deployment
    for key, n in (
        ("deployment.num_infer_nodes", d.num_infer_nodes),
        ("deployment.num_train_nodes", d.num_train_nodes),
    ):
        check(n >= 0, [key], f"must be >= 0, got {n}", "use 0 for a one-node job")
    check(
        (d.num_infer_nodes > 0) == (d.num_train_nodes > 0),
        ["deployment.num_infer_nodes", "deployment.num_train_nodes"],
        f"{d.num_infer_nodes} inference and {d.num_train_nodes} trainer nodes: a multi-node job needs both",
        "set both to 1 or more, or both to 0 for a one-node job",
    )
