"""Every cross-field rule of a run that reads nothing but the config: no env var, file, network or task build
(those are prime_rl/launcher/preflight.py, which runs these first). README "Modes and their rules";
docs/architecture.md, "Validation".

A knob's own range is one row of one table (`_knobs`); a rule over several knobs is a check() of its own. A
broken rule raises ConfigError, whose one-line message names the offending keys and the fix.
"""

from urllib.parse import urlparse

from prime_rl.config.layout import pushes_weights
from prime_rl.config.modes import RolloutSource, mode_config, mode_named, modes_with, run_modes, source_modes, uses
from prime_rl.config.schema import (
    EPISODIC,
    MIX,
    Config,
    DistillSignal,
    Layout,
    RatioLevel,
    ReferenceSource,
    TeacherKind,
    WeightTransfer,
    node_gpus,
    num_nodes,
)
from prime_rl.config.sources import rollouts_key, rollouts_of, source_loss
from prime_rl.config.teachers import (
    DEFAULT,
    MULTI_NODE_NAMED_LOCAL_TEACHERS,
    REFERENCE,
    local_teachers,
    named_errors,
    teacher_key,
    teacher_view,
)
from prime_rl.config.user_error import check
from prime_rl.protocol.servers import SERVER_KEY_ENV

# Parts of header names that carry credentials (Authorization, X-Api-Key, X-Goog-Api-Key, Cookie, X-Auth-Token,
# …): their values belong in env vars (teacher.api_key_env, teacher.header_envs), never in a config file.
SECRET_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie", "session", "password", "credential")
# Chat request fields the orchestrator sets itself (teacher/chat_api.py): teacher.extra_body may not override them.
CHAT_FIELDS = ("model", "messages", "n", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stream")


def check_rules(cfg: Config, visible_gpus: int) -> None:
    """Raise ConfigError on the first broken rule. `visible_gpus`: GPUs the job will see."""
    rules = (
        _modes,
        _ranges,
        _pairs,
        _source_weights,
        _teachers,
        _mode,
        _episodes,
        _teacher,
        _lora,
        _reference,
        _nodes,
        _colocated,
        _weight_transfer,
    )
    for rule in (*rules, _gpus, _parallel):
        rule(cfg, visible_gpus)


def _modes(cfg: Config, _: int) -> None:
    """Every mode the run names exists (a built-in name, or a Mode at an import path), and modes.<name> holds the
    knobs of the run's own modes only, each of the mode's type and range."""
    modes = {mode.name: mode for mode in run_modes(cfg)}
    for name in cfg.modes:
        mode = modes.get(name)
        check(
            mode is not None and mode.config is not None,
            [f"modes.{name}"],
            f"{name} is none of this run's modes with knobs of their own ({', '.join(modes)})"
            if mode is None
            else f"{name} has no knobs of its own",
            f"drop modes.{name}" + ("" if mode else ", or train with it (training_mode or task.mix[i].mode)"),
        )
    for mode in modes.values():
        if mode.config is not None:
            mode_config(cfg, mode)


def _ranges(cfg: Config, _: int) -> None:
    for key, holds, problem, fix in _knobs(cfg):
        check(holds, [key], problem, fix)


def _knobs(cfg: Config) -> list[tuple[str, bool, str, str]]:
    """(key, whether its value is in range, what is wrong, the fix): each would otherwise fail deep in a
    process, mid-run. Only values, no arithmetic that could fail: the rules over several knobs run after."""
    o, t, inf, teacher, ws = cfg.orchestrator, cfg.trainer, cfg.inference, cfg.teacher, cfg.model.warm_start
    d, lora, tiny, launcher = cfg.deployment, t.lora, cfg.model.tiny, cfg.launcher
    rows = [
        ("max_steps", cfg.max_steps >= 1, f"must be >= 1, got {cfg.max_steps}", "set max_steps=100"),
        ("step_timeout_s", cfg.step_timeout_s > 0, "must be > 0", "use e.g. 3600 (an hour per step)"),
        ("orchestrator.rollouts_per_example", o.rollouts_per_example >= 1, "must be >= 1", "set it to 1 or more"),
        ("orchestrator.max_async_level", o.max_async_level >= 0, "must be >= 0", "use 0 (synchronous) or more"),
        ("orchestrator.requests_per_step", o.requests_per_step >= 1, "must be >= 1", "use e.g. 8"),
        ("orchestrator.log_samples", o.log_samples >= 0, "must be >= 0", "use 0 to log no samples"),
        ("orchestrator.sampling.temperature", o.sampling.temperature >= 0, "must be >= 0", "use e.g. 1.0"),
        ("orchestrator.sampling.top_p", 0 < o.sampling.top_p <= 1, "must be in (0, 1]", "use e.g. 1.0"),
        ("orchestrator.eval.interval", o.eval.interval >= 0, "must be >= 0", "use 0 to disable eval"),
        ("orchestrator.eval.num_examples", o.eval.num_examples >= 1, "must be >= 1", "use e.g. 64"),
        ("orchestrator.eval.samples_per_prompt", o.eval.samples_per_prompt >= 1, "must be >= 1", "use e.g. 4"),
        (
            "orchestrator.eval.temperature",
            o.eval.temperature >= 0,
            f"must be >= 0, got {o.eval.temperature}",
            "use e.g. 0 (greedy) or 1.0",
        ),
        ("orchestrator.verification.workers", o.verification.workers >= 1, "must be >= 1", "use e.g. 2"),
        ("orchestrator.verification.timeout_s", o.verification.timeout_s > 0, "must be > 0", "use e.g. 10"),
        (
            "orchestrator.request_timeout_s",
            o.request_timeout_s >= 0,
            f"must be >= 0, got {o.request_timeout_s}",
            "use 0 (auto) or e.g. 600",
        ),
        ("orchestrator.max_retries", o.max_retries >= 0, f"must be >= 0, got {o.max_retries}", "use e.g. 3"),
        (
            "orchestrator.length.overlong_buffer",
            0 <= o.length.overlong_buffer < o.sampling.max_tokens,
            f"must be in [0, max_tokens={o.sampling.max_tokens}), got {o.length.overlong_buffer}",
            "use e.g. a quarter of orchestrator.sampling.max_tokens, or 0 (off)",
        ),
        (
            "orchestrator.length.overlong_penalty",
            o.length.overlong_penalty >= 0,
            f"must be >= 0, got {o.length.overlong_penalty}",
            "use e.g. 1.0",
        ),
        (
            "orchestrator.dynamic_sampling.max_refills",
            o.dynamic_sampling.max_refills >= 0,
            f"must be >= 0, got {o.dynamic_sampling.max_refills}",
            "use e.g. 3 (0: only fill with what the step drew)",
        ),
        (
            "orchestrator.difficulty.skip_steps",
            o.difficulty.skip_steps >= 1,
            f"must be >= 1, got {o.difficulty.skip_steps}",
            "use e.g. 50",
        ),
        (
            "orchestrator.difficulty.max_pass_rate",
            o.difficulty.min_pass_rate < o.difficulty.max_pass_rate,
            f"the band [{o.difficulty.min_pass_rate}, {o.difficulty.max_pass_rate}] is empty",
            "keep min_pass_rate below max_pass_rate, e.g. 0.0 and 1.0 (skip what always fails or always passes)",
        ),
        ("trainer.optim.lr", t.optim.lr >= 0, f"must be >= 0, got {t.optim.lr}", "use e.g. 3e-4"),
        ("trainer.optim.max_grad_norm", t.optim.max_grad_norm > 0, "must be > 0", "use e.g. 1.0"),
        ("trainer.optim.beta1", 0 <= t.optim.beta1 < 1, f"must be in [0, 1), got {t.optim.beta1}", "use e.g. 0.9"),
        ("trainer.optim.beta2", 0 <= t.optim.beta2 < 1, f"must be in [0, 1), got {t.optim.beta2}", "use e.g. 0.98"),
        (
            "trainer.optim.warmup_steps",
            t.optim.warmup_steps >= 0,
            f"must be >= 0, got {t.optim.warmup_steps}",
            "use e.g. 10",
        ),
        ("trainer.micro_batch_size", t.micro_batch_size >= 0, "must be >= 0", "use 0 (auto) or e.g. 64"),
        ("trainer.pack_tokens", t.pack_tokens >= 0, f"must be >= 0, got {t.pack_tokens}", "use 0 (off) or e.g. 2048"),
        (
            "trainer.collective_timeout_s",
            t.collective_timeout_s >= 0,
            f"must be >= 0, got {t.collective_timeout_s}",
            "use 0 (auto) or e.g. 1800",
        ),
        (
            "trainer.dtype",
            t.dtype in ("auto", "float32", "bfloat16"),
            f"unknown compute dtype {t.dtype!r}",
            "use auto, float32 or bfloat16",
        ),
        ("trainer.loss.adv_tau", t.loss.adv_tau >= 0, "must be >= 0", "use 1.0, or 0 for pure distillation"),
        (
            "trainer.loss.teacher_tau",
            t.loss.teacher_tau >= 0,
            "must be >= 0",
            "use a value > 0 where a mode scores tokens, 0 else",
        ),
        ("trainer.loss.kl_tau", t.loss.kl_tau >= 0, "must be >= 0", "use 0 to disable"),
        ("trainer.loss.kl_ref_tau", t.loss.kl_ref_tau >= 0, "must be >= 0", "use 0 to disable, or e.g. 1e-3"),
        ("trainer.loss.entropy_tau", t.loss.entropy_tau >= 0, "must be >= 0", "use 0 to disable, or e.g. 1e-3"),
        (
            "trainer.loss.seq_clip_low",
            0 <= t.loss.seq_clip_low < 1,
            f"must be in [0, 1), got {t.loss.seq_clip_low}",
            "use e.g. 3e-4",
        ),
        ("trainer.loss.seq_clip_high", t.loss.seq_clip_high >= 0, "must be >= 0", "use e.g. 4e-4"),
        ("trainer.loss.mask_band", t.loss.mask_band > 0, "must be > 0", "use e.g. 0.2"),
        (
            "trainer.loss.distill_top_k",
            t.loss.distill_top_k >= 1,
            f"must be >= 1, got {t.loss.distill_top_k}",
            "use e.g. 32",
        ),
        ("trainer.num_procs", t.num_procs >= 1, f"must be >= 1, got {t.num_procs}", "use 1, or more on CPU"),
        ("trainer.num_threads", t.num_threads >= 0, f"must be >= 0, got {t.num_threads}", "use 0 (auto) or more"),
        ("ckpt.interval", cfg.ckpt.interval >= 0, "must be >= 0", "use 0 to checkpoint only at the end"),
        (
            "ckpt.keep",
            cfg.ckpt.keep >= 1,
            "must be >= 1 (the newest checkpoint is always kept)",
            "use e.g. 2",
        ),
        ("inference.port", 0 <= inf.port <= 65535, f"{inf.port} is not a port", "use 0 to pick a free port"),
        ("teacher.port", 0 <= teacher.port <= 65535, f"{teacher.port} is not a port", "use 0 to pick a free port"),
        (
            "inference.kv_cache_bytes",
            inf.kv_cache_bytes > 0,
            f"must be > 0, got {inf.kv_cache_bytes}",
            "use e.g. 67108864",
        ),
        (
            "inference.gpu_memory_utilization",
            0 < inf.gpu_memory_utilization <= 1,
            f"must be in (0, 1], got {inf.gpu_memory_utilization}",
            "use e.g. 0.9",
        ),
        ("inference.tp", inf.tp >= 1, f"must be >= 1, got {inf.tp}", "use 1 or more"),
        ("inference.dp", inf.dp >= 1, f"must be >= 1, got {inf.dp}", "use 1 or more"),
        (
            "teacher.request_timeout_s",
            teacher.request_timeout_s >= 0,
            f"must be >= 0, got {teacher.request_timeout_s}",
            "use 0 (auto) or e.g. 600",
        ),
        (
            "teacher.max_num_batched_tokens",
            teacher.max_num_batched_tokens >= 0,
            f"must be >= 0, got {teacher.max_num_batched_tokens}",
            "use 0 (auto) or e.g. 2048",
        ),
        ("teacher.max_retries", teacher.max_retries >= 0, f"must be >= 0, got {teacher.max_retries}", "use e.g. 5"),
        (
            "teacher.max_concurrency",
            teacher.max_concurrency >= 1,
            f"must be >= 1, got {teacher.max_concurrency}",
            "use e.g. 32",
        ),
        (
            "teacher.max_tokens",
            teacher.max_tokens is None or teacher.max_tokens >= 1,
            f"must be >= 1, got {teacher.max_tokens}",
            "use e.g. 256",
        ),
        ("model.warm_start.steps", ws.steps >= 0, f"must be >= 0 (0 = random init), got {ws.steps}", "use e.g. 80"),
        ("model.warm_start.batch_size", ws.batch_size >= 1, f"must be >= 1, got {ws.batch_size}", "use e.g. 64"),
        (
            "model.warm_start.warmup_steps",
            ws.warmup_steps >= 0,
            f"must be >= 0, got {ws.warmup_steps}",
            "use e.g. 20",
        ),
        (
            "monitor.samples_interval",
            cfg.monitor.samples_interval >= 0,
            f"must be >= 0, got {cfg.monitor.samples_interval}",
            "use e.g. 10",
        ),
        (
            "monitor.num_samples",
            cfg.monitor.num_samples >= 0,
            f"must be >= 0, got {cfg.monitor.num_samples}",
            "use e.g. 16",
        ),
        (
            "launcher.ready_timeout_s",
            launcher.ready_timeout_s >= 0,
            f"must be >= 0, got {launcher.ready_timeout_s}",
            "use 0 (auto) or e.g. 1800",
        ),
        (
            "launcher.stop_grace_s",
            launcher.stop_grace_s >= 0,
            f"must be >= 0, got {launcher.stop_grace_s}",
            "use e.g. 5",
        ),
        *(
            (f"model.tiny.{name}", getattr(tiny, name) >= 1, "must be >= 1", "use the default or a larger value")
            for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size")
        ),
        ("deployment.num_infer_gpus", d.num_infer_gpus >= 0, f"must be >= 0, got {d.num_infer_gpus}", "use 0 for CPU"),
        ("deployment.num_train_gpus", d.num_train_gpus >= 0, f"must be >= 0, got {d.num_train_gpus}", "use 0 for CPU"),
        (
            "deployment.num_teacher_gpus",
            (d.num_teacher_gpus or 0) >= 0,
            f"must be >= 0, got {d.num_teacher_gpus}",
            "use 0 for CPU",
        ),
        (
            "deployment.num_infer_nodes",
            d.num_infer_nodes >= 0,
            f"must be >= 0, got {d.num_infer_nodes}",
            "use 0 for a one-node job",
        ),
        (
            "deployment.num_train_nodes",
            d.num_train_nodes >= 0,
            f"must be >= 0, got {d.num_train_nodes}",
            "use 0 for a one-node job",
        ),
    ]
    if teacher.kind != TeacherKind.none:  # a teacher's and an adapter's knobs are read only when there is one
        rows.append(("teacher.rate_limit_wait_s", teacher.rate_limit_wait_s >= 0, "must be >= 0", "use e.g. 600"))
    if teacher.gpu_memory_utilization is not None:
        share = teacher.gpu_memory_utilization
        rows.append(
            ("teacher.gpu_memory_utilization", 0 < share <= 1, f"must be in (0, 1], got {share}", "use e.g. 0.3")
        )
    if lora.enabled:
        rows += [
            ("trainer.lora.rank", lora.rank >= 1, "must be >= 1", "use e.g. 8"),
            ("trainer.lora.alpha", lora.alpha > 0, "must be > 0", "use e.g. 16"),
            (
                "trainer.lora.target_modules",
                bool(lora.target_modules),
                "is empty",
                "list modules, e.g. [q_proj,v_proj]",
            ),
        ]
    return rows


def _pairs(cfg: Config, _: int) -> None:
    """Knobs that must fit one another."""
    o, loss, tiny = cfg.orchestrator, cfg.trainer.loss, cfg.model.tiny
    check(
        o.batch_size >= 1 and o.batch_size % o.rollouts_per_example == 0,
        ["orchestrator.batch_size", "orchestrator.rollouts_per_example"],
        f"batch_size {o.batch_size} is not a positive multiple of rollouts_per_example {o.rollouts_per_example}",
        "make batch_size a multiple of rollouts_per_example",
    )
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
    check(
        0 <= loss.ratio_low <= 1 <= loss.ratio_high,
        ["trainer.loss.ratio_low", "trainer.loss.ratio_high"],
        f"the ratio band [{loss.ratio_low}, {loss.ratio_high}] must contain 1 (an on-policy token)",
        "use e.g. ratio_low=0.5 ratio_high=5",
    )
    check(
        tiny.hidden_size % tiny.num_heads == 0 and tiny.num_heads % tiny.num_kv_heads == 0,
        ["model.tiny.hidden_size", "model.tiny.num_heads", "model.tiny.num_kv_heads"],
        "hidden_size must be a multiple of num_heads, and num_heads of num_kv_heads",
        "use e.g. hidden_size=128 num_heads=4 num_kv_heads=2",
    )


def _mode(cfg: Config, _: int) -> None:
    """The rules a mode's facts (config/modes.py) imply for the rest of the config: per task source where a mix sets
    modes per source, for the run's shared knobs where any of its modes (or all) needs them."""
    sources, loss, teacher = source_modes(cfg), cfg.trainer.loss, cfg.teacher.kind
    check(
        cfg.task.mode is None,
        ["task.mode"],
        f"task.mode={cfg.task.mode} sets the mode of a source of task.mix, and this task is {cfg.task.name}",
        f"set training_mode={cfg.task.mode} instead",
    )
    for key, src, mode in sources:
        name = mode.name
        check(
            teacher != TeacherKind.none or not mode.teacher or src.teacher is not None,
            [key, "teacher"],
            f"{name} needs a teacher" + ("" if key == "training_mode" else f" ({key})"),
            "add teacher=local_vllm or teacher=external",
        )
    modes = run_modes(cfg)
    student = [m for m in modes if m.trains_sampled_policy]
    keys = sorted({key for key, _, _ in sources})
    names = "|".join(m.name for m in modes)
    if student:
        _sampling_policy(cfg, student[0].name)
    check(
        teacher == TeacherKind.none or any(m.teacher for m in modes),
        [*keys, "teacher"],
        f"{names} takes no teacher, got teacher={teacher.value}",
        f"use teacher=none, or training_mode={modes_with(lambda m: m.teacher)} to learn from a teacher",
    )
    check(
        teacher == TeacherKind.none or any(mode.teacher and src.teacher is None for _, src, mode in sources),
        ["teacher", "task.mix"],
        f"every source that learns from a teacher names one of `teachers`, so teacher={teacher.value} teaches none",
        "use teacher=none, or let a source learn from it (drop its task.mix[i].teacher)",
    )
    # the sources whose tokens are scored that take trainer.loss.teacher_tau (a source's own: _source_weights)
    scored = [mode for _, src, mode in sources if mode.scores_tokens and src.teacher_tau is None]
    if scored:
        check(
            loss.teacher_tau > 0,
            ["trainer.loss.teacher_tau"],
            f"{scored[0].name} scores the student's tokens, so it needs teacher_tau > 0",
            "set trainer.loss.teacher_tau=1.0",
        )
    if not any(m.scores_tokens for m in modes):
        scorers = modes_with(lambda m: m.scores_tokens)
        check(
            loss.teacher_tau == 0,
            ["trainer.loss.teacher_tau", *keys],
            f"teacher_tau={loss.teacher_tau} weighs the scorer's term of {scorers}, and this run trains with {names}",
            f"set trainer.loss.teacher_tau=0 or training_mode={scorers}",
        )
        check(
            loss.distill == DistillSignal.sampled,
            ["trainer.loss.distill", *keys],
            f"distill={loss.distill.value} only applies in {scorers}, where the student's tokens are scored",
            f"set trainer.loss.distill=sampled or training_mode={scorers}",
        )
    verification = cfg.orchestrator.verification.enabled
    for key, _, mode in sources:
        check(
            verification or not mode.needs_rewards,
            ["orchestrator.verification.enabled", key],
            f"{mode.name} learns from rewards, so verification must be on",
            "set orchestrator.verification.enabled=true",
        )
    check(
        bool(student) or loss.ratio_level == RatioLevel.token,
        ["trainer.loss.ratio_level", *keys],
        f"a sequence-level importance ratio weighs the student's own samples, and {names} trains on the teacher's",
        "set trainer.loss.ratio_level=token",
    )
    length = cfg.orchestrator.length
    check(
        bool(student) or not (length.overlong_buffer or length.mask_truncated),
        ["orchestrator.length", *keys],
        f"length shaping applies to the student's own replies, and {names} trains on the teacher's",
        "set orchestrator.length.overlong_buffer=0 and orchestrator.length.mask_truncated=false",
    )
    # the prompt filters act on whole steps: every source's groups must be ones they can judge
    for i, (key, src, mode) in enumerate(sources):
        name = mode.name
        n_key = rollouts_key(cfg, i, src)
        check(
            not cfg.orchestrator.difficulty.enabled or rollouts_of(cfg, src) > 1,
            ["orchestrator.difficulty.enabled", n_key],
            "the difficulty filter judges a prompt by its group's rewards, and a group of one sample always passed "
            "or always failed",
            f"set {n_key}=2 or more, or orchestrator.difficulty.enabled=false",
        )
        check(
            not cfg.orchestrator.dynamic_sampling.enabled or (mode.advantages and not mode.scores_tokens),
            ["orchestrator.dynamic_sampling.enabled", key],
            f"dynamic sampling drops groups without a signal, and every {name} group has one"
            + (f" (its {mode.scorer.value} scores each token)" if mode.scores_tokens else " (the teacher's answers)"),
            f"use it with {key}={modes_with(lambda m: m.advantages and not m.scores_tokens)}, "
            "or set orchestrator.dynamic_sampling.enabled=false",
        )
        check(
            not cfg.orchestrator.difficulty.enabled or mode.trains_sampled_policy,
            ["orchestrator.difficulty.enabled", key],
            f"the difficulty filter judges prompts by the student's own rewards, and {name} trains on the teacher's",
            f"use it with {key}={modes_with(lambda m: m.trains_sampled_policy)}, "
            "or set orchestrator.difficulty.enabled=false",
        )
    check(
        verification or not cfg.orchestrator.difficulty.enabled,
        ["orchestrator.difficulty.enabled", "orchestrator.verification.enabled"],
        "the difficulty filter judges prompts by their rewards, but verification is off",
        "set orchestrator.verification.enabled=true, or orchestrator.difficulty.enabled=false",
    )
    # the largest adv_tau a sample with advantages trains with (a mix source's own, or trainer.loss's)
    adv_tau = max((source_loss(loss, src).adv_tau for _, src, mode in sources if mode.advantages), default=0)
    if any(m.advantages for m in modes):
        check(
            verification or adv_tau == 0,
            ["trainer.loss.adv_tau", "orchestrator.verification.enabled"],
            f"adv_tau={adv_tau} needs rewards but verification is off",
            "set trainer.loss.adv_tau=0 (pure distillation) or orchestrator.verification.enabled=true",
        )
    for i, (_, src, mode) in enumerate(sources):
        if not mode.advantages:
            continue
        at = f"task.mix[{i}]" if cfg.task.name == MIX else "task"  # where the source sets its own
        tau, n = source_loss(loss, src).adv_tau, rollouts_of(cfg, src)
        tau_key = f"{at}.adv_tau" if src.adv_tau is not None else "trainer.loss.adv_tau"
        n_key = rollouts_key(cfg, i, src)
        check(
            tau == 0 or n > 1,
            [tau_key, n_key],
            f"adv_tau={tau} weighs GRPO advantages, which are always 0 with one rollout per prompt",
            f"set {n_key}=2 or more, or {tau_key}=0 (pure distillation)",
        )


def _source_weights(cfg: Config, _: int) -> None:
    """A mix source's own adv_tau, teacher_tau and rollouts_per_example: only where its mode has that term, and what
    the term needs."""
    task = cfg.task
    check(
        task.adv_tau is None and task.teacher_tau is None,
        ["task.adv_tau", "task.teacher_tau"],
        f"these set the loss weights of a source of task.mix, and this task is {task.name}",
        "set trainer.loss.adv_tau and trainer.loss.teacher_tau instead",
    )
    check(
        task.rollouts_per_example is None,
        ["task.rollouts_per_example"],
        f"it sets the samples per prompt of a source of task.mix, and this task is {task.name}",
        "set orchestrator.rollouts_per_example instead",
    )
    for i, src in enumerate(task.mix if task.name == MIX else []):
        at = f"task.mix[{i}]"
        mode = mode_named(src.mode, f"{at}.mode") if src.mode else mode_named(cfg.training_mode)
        check(
            src.rollouts_per_example is None or src.rollouts_per_example >= 1,
            [f"{at}.rollouts_per_example"],
            f"must be >= 1, got {src.rollouts_per_example}",
            f"set {at}.rollouts_per_example=1 or more, or drop it (orchestrator.rollouts_per_example)",
        )
        if src.teacher_tau is not None:
            scorers = modes_with(lambda m: m.scores_tokens)
            check(
                mode.scores_tokens,
                [f"{at}.teacher_tau", f"{at}.mode"],
                f"teacher_tau weighs the scorer's term of {scorers} samples, and this source trains in {mode.name}",
                f"drop {at}.teacher_tau, or set {at}.mode={scorers}",
            )
            check(
                src.teacher_tau > 0,
                [f"{at}.teacher_tau"],
                f"{mode.name} scores the student's tokens, so it needs teacher_tau > 0",
                f"set {at}.teacher_tau=1.0",
            )
        if src.adv_tau is not None:
            advantaged = modes_with(lambda m: m.advantages)
            check(
                mode.advantages,
                [f"{at}.adv_tau", f"{at}.mode"],
                f"adv_tau weighs the advantages of {advantaged} samples, and this source trains in {mode.name}",
                f"drop {at}.adv_tau, or set {at}.mode={advantaged}",
            )
            check(src.adv_tau >= 0, [f"{at}.adv_tau"], "must be >= 0", "use 1.0, or 0 for pure distillation")


def _teachers(cfg: Config, _: int) -> None:
    """Named teachers (`teachers.<name>`): each a teacher by `teacher`'s rules, each teaching a mix source whose mode
    learns from one; a local one is a server of the run like `teacher`'s (its GPUs: _gpus)."""
    sources = source_modes(cfg)
    check(
        cfg.task.teacher is None,
        ["task.teacher"],
        f"task.teacher names the teacher of a source of task.mix, and this task is {cfg.task.name}",
        "set the teacher itself: teacher=local_vllm or teacher=external",
    )
    for i, (_, src, mode) in enumerate(sources if cfg.task.name == MIX else []):
        if src.teacher is None:
            continue
        at = f"task.mix[{i}]"
        check(
            src.teacher in cfg.teachers,
            [f"{at}.teacher"],
            f"{src.teacher!r} is none of the named teachers ({', '.join(cfg.teachers) or 'there are none'})",
            f"add it, e.g. '++teachers={{{src.teacher}:{{kind:local_vllm,model:tiny}}}}', or drop {at}.teacher",
        )
        check(
            mode.teacher,
            [f"{at}.teacher", f"{at}.mode"],
            f"this source trains in {mode.name}, which takes no teacher",
            f"drop {at}.teacher, or set {at}.mode={modes_with(lambda m: m.teacher)}",
        )
    taught = {src.teacher for _, src, mode in sources if mode.teacher}
    named_local = [name for name in local_teachers(cfg) if name != DEFAULT]
    check(
        num_nodes(cfg.deployment) == 1 or len(named_local) <= MULTI_NODE_NAMED_LOCAL_TEACHERS,
        ["teachers", "deployment.num_infer_nodes"],
        f"a multi-node job keeps ports for {MULTI_NODE_NAMED_LOCAL_TEACHERS} named local teachers, "
        f"and this one has {len(named_local)}",
        "make some of them external (served elsewhere), or run on one node",
    )
    for name, t in cfg.teachers.items():
        key = teacher_key(name)
        check(
            name.isidentifier(),
            [key],
            f"{name!r} cannot name a teacher: it names its server's role and its metrics",
            "use letters, digits and _",
        )
        check(
            t.kind != TeacherKind.none,
            [f"{key}.kind"],
            "a named teacher is local_vllm or external",
            f"set {key}.kind=local_vllm (with {key}.model) or external",
        )
        check(name in taught, [key], "no source of task.mix names it", f"set task.mix[i].teacher={name} on a source")
        with named_errors(name):
            _teacher(teacher_view(cfg, name), 0)


def _episodes(cfg: Config, _: int) -> None:
    """A local teacher that plays episodes (writes the rollouts) reads every episode source's tool calls with one
    parser."""
    played = [src for _, src, mode in source_modes(cfg) if mode.rollouts == RolloutSource.teacher]
    parsers = {src.tool_parser for src in played if src.name in EPISODIC}
    check(
        len(parsers) <= 1 or cfg.teacher.kind != TeacherKind.local_vllm,
        ["task.mix", "teacher"],
        f"the local teacher's server reads tool calls with one parser, but the episode sources use {sorted(parsers)}",
        "give every gym and verifiers source of the mix the same task.tool_parser",
    )


def _sampling_policy(cfg: Config, mode: str) -> None:
    """A mode trained on the student's samples trains the policy that sampled: the trainer reproduces its temperature,
    not a truncation."""
    s = cfg.orchestrator.sampling
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
            cfg.deployment.num_teacher_gpus is None or local_teachers(cfg),
            ["deployment.num_teacher_gpus", "teacher"],
            "an external teacher runs elsewhere and gets no local GPUs",
            "drop deployment.num_teacher_gpus or use teacher=local_vllm",
        )
        _teacher_secrets(cfg)
    _teacher_requests(cfg)
    leaked = sorted(h for h in t.headers if any(word in h.lower() for word in SECRET_HEADER_WORDS))
    check(
        not leaked,
        [f"teacher.headers.{h}" for h in leaked],
        "a credential in teacher.headers would be written to config dumps",
        f"put its value in an env var and set +teacher.header_envs.{leaked[0] if leaked else '<name>'}=<VAR>",
    )


def _teacher_secrets(cfg: Config) -> None:
    """The env vars an external teacher's secrets come from are not the run's own server key (whether they are
    set is the launcher's preflight: an env var is not the config)."""
    t = cfg.teacher
    check(
        t.api_key_env != SERVER_KEY_ENV,
        ["teacher.api_key_env"],
        f"{SERVER_KEY_ENV} holds the run's own server key, which the launcher sets for its children",
        "keep the teacher's key in another env var, e.g. teacher.api_key_env=OPENAI_API_KEY",
    )
    for name, env in t.header_envs.items():
        check(
            env != SERVER_KEY_ENV,
            [f"teacher.header_envs.{name}"],
            f"{SERVER_KEY_ENV} holds the run's own server key",
            f"export {env}=<value> before launching, or name another variable",
        )


def _teacher_requests(cfg: Config) -> None:
    """How the teacher is asked: prices, and provider fields that leave our own alone."""
    t, s = cfg.teacher, cfg.orchestrator.sampling
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
    check(
        not urlparse(t.base_url or "").password,
        ["teacher.base_url"],
        "a password in the URL would be written to config dumps",
        "drop it from the URL and put the key in the env var named by teacher.api_key_env",
    )


def _lora(cfg: Config, _: int) -> None:
    lora = cfg.trainer.lora
    if lora.enabled:
        check(
            lora.dropout == 0 or not uses(cfg, lambda m: m.trains_sampled_policy),
            ["trainer.lora.dropout", "training_mode"],
            f"must be 0 in {modes_with(lambda m: m.trains_sampled_policy)}: with dropout the trainer's policy is not "
            "the one vLLM sampled from",
            f"set trainer.lora.dropout=0 (it regularises {modes_with(lambda m: not m.trains_sampled_policy)} only)",
        )


def _reference(cfg: Config, _: int) -> None:
    """A reference served by vLLM (trainer.loss.kl_ref_from=vllm): for full fine-tuning, in place of the trainer's
    frozen copy; under LoRA the trainer's reference is its base with the adapter off, which costs no weights."""
    loss = cfg.trainer.loss
    if loss.kl_ref_from != ReferenceSource.vllm:
        return
    check(
        loss.kl_ref_tau > 0,
        ["trainer.loss.kl_ref_from", "trainer.loss.kl_ref_tau"],
        "a served reference scores every sample for the reference KL, which is off (kl_ref_tau=0)",
        "set trainer.loss.kl_ref_tau > 0 (e.g. 0.05), or drop trainer.loss.kl_ref_from",
    )
    check(
        not cfg.trainer.lora.enabled,
        ["trainer.loss.kl_ref_from", "lora"],
        "under LoRA the reference is the trainer's base model with the adapter off: no weights to serve",
        "set trainer.loss.kl_ref_from=trainer",
    )
    check(
        cfg.orchestrator.sampling.temperature == 1.0,
        ["trainer.loss.kl_ref_from", "orchestrator.sampling.temperature"],
        "a served reference scores tokens at temperature 1, the trainer's KL compares at the sampling temperature",
        "sample at orchestrator.sampling.temperature=1.0, or set trainer.loss.kl_ref_from=trainer",
    )
    check(
        REFERENCE not in cfg.teachers,
        [f"teachers.{REFERENCE}"],
        f"{REFERENCE!r} names the served reference of trainer.loss.kl_ref_from=vllm",
        "give the teacher another name",
    )


def _nodes(cfg: Config, _: int) -> None:
    d = cfg.deployment
    check(
        (d.num_infer_nodes > 0) == (d.num_train_nodes > 0),
        ["deployment.num_infer_nodes", "deployment.num_train_nodes"],
        f"{d.num_infer_nodes} inference and {d.num_train_nodes} trainer nodes: a multi-node job needs both",
        "set both to 1 or more, or both to 0 for a one-node job",
    )


def _colocated(cfg: Config, _: int) -> None:
    """One device shared in turns: the CPU or one GPU, one node, one trainer process, no second device for a
    teacher."""
    d = cfg.deployment
    if d.layout != Layout.colocated:
        return
    fix_gpus = "use deployment=colocated (CPU) or deployment=colocated_gpu (one GPU); more GPUs: deployment=gpu"
    check(
        d.num_infer_gpus == d.num_train_gpus <= 1,
        ["deployment.layout", "deployment.num_infer_gpus", "deployment.num_train_gpus"],
        f"colocated roles share one device, but num_infer_gpus={d.num_infer_gpus}, num_train_gpus={d.num_train_gpus}",
        fix_gpus,
    )
    check(
        d.num_teacher_gpus is None,
        ["deployment.layout", "deployment.num_teacher_gpus"],
        "a colocated teacher shares the student's device and gets no GPUs of its own",
        "drop deployment.num_teacher_gpus",
    )
    check(
        num_nodes(d) == 1,
        ["deployment.layout", "deployment.num_infer_nodes", "deployment.num_train_nodes"],
        "the colocated layout shares one machine's device, a multi-node job has several",
        "use deployment.layout=separate for a multi-node job",
    )
    check(
        cfg.trainer.num_procs == 1,
        ["deployment.layout", "trainer.num_procs"],
        f"num_procs={cfg.trainer.num_procs}: in turns, one trainer process already has every core",
        "drop trainer.num_procs",
    )


def _weight_transfer(cfg: Config, _: int) -> None:
    """A push (nccl, gloo) hands the trainer's full weights to the student server of this node, device to device:
    an adapter, another node, or one GPU shared in turns go through files."""
    if not pushes_weights(cfg):
        return
    way = cfg.inference.weight_transfer
    d, key = cfg.deployment, f"inference.weight_transfer={way.value}"
    check(
        not cfg.trainer.lora.enabled,
        ["inference.weight_transfer", "lora"],
        f"{key} pushes full weights; under LoRA the server loads the adapter from the run dir",
        "set inference.weight_transfer=files, or lora=off",
    )
    check(
        num_nodes(d) == 1,
        ["inference.weight_transfer", "deployment.num_infer_nodes"],
        f"{key} reaches the student server of the trainer's own node; a multi-node job has one per node",
        "set inference.weight_transfer=files for a multi-node job",
    )
    if way == WeightTransfer.gloo:
        check(
            d.num_infer_gpus == 0,
            ["inference.weight_transfer", "deployment.num_infer_gpus"],
            "gloo is the CPU build's transport, the student server runs on GPUs",
            "set inference.weight_transfer=nccl (or files) on GPUs",
        )
        return
    check(
        d.num_infer_gpus > 0 and d.num_train_gpus > 0,
        ["inference.weight_transfer", "deployment.num_infer_gpus", "deployment.num_train_gpus"],
        f"nccl moves weights between GPUs, but num_infer_gpus={d.num_infer_gpus}, num_train_gpus={d.num_train_gpus}",
        "use deployment=gpu, or inference.weight_transfer=gloo (or files) on CPU",
    )
    check(
        d.layout != Layout.colocated,
        ["inference.weight_transfer", "deployment.layout"],
        "nccl needs the trainer and the student server on GPUs of their own; colocated they share one",
        "use deployment=gpu, or inference.weight_transfer=files",
    )


def _gpus(cfg: Config, visible_gpus: int) -> None:
    d = cfg.deployment
    local = local_teachers(cfg)
    check(
        d.num_teacher_gpus is None or local,
        ["deployment.num_teacher_gpus", "teacher"],
        f"GPUs for a teacher server, but teacher={cfg.teacher.kind.value} starts none",
        "drop deployment.num_teacher_gpus or use teacher=local_vllm",
    )
    if d.num_infer_gpus > 0 and local and d.layout != Layout.colocated:
        names = ", ".join(teacher_key(name) for name in local)
        check(
            bool(d.num_teacher_gpus),
            ["deployment.num_teacher_gpus"],
            f"a GPU deployment needs GPUs for the local teachers' servers ({names})",
            f"set deployment.num_teacher_gpus={len(local)} (one each) or more",
        )
        check(
            d.num_teacher_gpus % len(local) == 0,
            ["deployment.num_teacher_gpus"],
            f"{d.num_teacher_gpus} GPUs do not split evenly between the servers of {len(local)} local teachers "
            f"({names})",
            f"set deployment.num_teacher_gpus to a multiple of {len(local)}",
        )
    check_gpu_count(cfg, visible_gpus)


def check_gpu_count(cfg: Config, visible_gpus: int) -> None:
    """The GPUs a node of the job uses fit the `visible_gpus` it sees: checked at launch against what the job
    will get, and again by the job against what it got (a SLURM allocation)."""
    d = cfg.deployment
    counts = ["deployment.num_infer_gpus", "deployment.num_train_gpus"]
    if d.num_teacher_gpus is not None:
        counts.append("deployment.num_teacher_gpus")
    asked = node_gpus(d)  # multi-node: each node sees its own GPUs
    check(
        asked <= visible_gpus,
        counts,
        f"{asked} GPUs asked{' per node' if num_nodes(d) > 1 else ''} but {visible_gpus} visible",
        "lower the GPU counts or set CUDA_VISIBLE_DEVICES to more devices",
    )


def _parallel(cfg: Config, _: int) -> None:
    d, t, inf = cfg.deployment, cfg.trainer, cfg.inference
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
