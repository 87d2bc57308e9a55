"""The teachers: `teacher`, the named ones a mix's sources learn from, and the served reference."""

from urllib.parse import urlparse

from prime_rl.config.modes import RolloutSource, modes_with, source_modes
from prime_rl.config.schema import (
    EPISODIC,
    MIX,
    Config,
    ReferenceSource,
    TeacherKind,
    num_nodes,
)
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


def named_teachers(cfg: Config, _: int) -> None:
    """Named teachers (`teachers.<name>`): each a teacher by `teacher`'s rules, each teaching a mix source whose mode
    learns from one; a local one is a server of the run like `teacher`'s (its GPUs: gpu_counts)."""
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
        check(
            name in taught or name == cfg.judge.teacher,
            [key],
            "no source of task.mix names it, and it is not the judge",
            f"set task.mix[i].teacher={name} on a source, or judge.teacher={name}",
        )
        with named_errors(name):
            teacher_settings(teacher_view(cfg, name), 0)


def teacher_tool_parser(cfg: Config, _: int) -> None:
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


def teacher_settings(cfg: Config, _: int) -> None:
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
        teacher_secrets(cfg)
    teacher_requests(cfg)
    teacher_prompt(cfg)
    check(
        t.cache_max_gib == 0 or t.cache_dir is not None,
        ["teacher.cache_max_gib", "teacher.cache_dir"],
        "teacher.cache_max_gib bounds the scores kept in teacher.cache_dir, which is not set",
        "set teacher.cache_dir=<a dir>, or drop teacher.cache_max_gib",
    )
    check(
        t.tokenizer is None or kind == TeacherKind.external,
        ["teacher.tokenizer", "teacher"],
        "a local teacher's tokenizer is its model's",
        "drop teacher.tokenizer (it is for an external teacher with another tokenizer than the student's)",
    )
    leaked = sorted(h for h in t.headers if any(word in h.lower() for word in SECRET_HEADER_WORDS))
    check(
        not leaked,
        [f"teacher.headers.{h}" for h in leaked],
        "a credential in teacher.headers would be written to config dumps",
        f"put its value in an env var and set +teacher.header_envs.{leaked[0] if leaked else '<name>'}=<VAR>",
    )


def teacher_prompt(cfg: Config) -> None:
    """A teacher's system_prompt is a template of the reference answer alone, shown before a prompt: a source of
    episodes (whose prompts come from its environment) is not taught with one."""
    shown = cfg.teacher.system_prompt
    if shown is None:
        return
    try:
        fields = shown.format(answer="") is not None
    except (KeyError, IndexError, ValueError):
        fields = False
    check(
        fields,
        ["teacher.system_prompt"],
        f"{shown!r} names a field other than {{answer}}, or has a lone brace",
        "write {answer} where the reference answer goes, and {{ or }} for a brace of the text",
    )
    taught = [src for _, src, mode in source_modes(cfg) if mode.teacher]
    # in a named teacher's view (config/teachers.py teacher_view) its sources name it, and `teacher` is its settings
    mine = [src for src in taught if src.teacher is None or cfg.teachers.get(src.teacher) == cfg.teacher]
    played = [src.label or src.name for src in mine if src.name in EPISODIC]
    check(
        not played,
        ["teacher.system_prompt"],
        f"a teacher's system_prompt is shown before a prompt, and {', '.join(played)} plays episodes",
        "drop it, or teach the episodes with another teacher (teachers.<name>, task.mix[i].teacher)",
    )


def teacher_secrets(cfg: Config) -> None:
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


def teacher_requests(cfg: Config) -> None:
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


def served_reference(cfg: Config, _: int) -> None:
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
