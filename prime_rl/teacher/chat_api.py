"""The chat request a teacher's endpoint accepts. Hosted APIs are stricter than vLLM: OpenAI's reasoning models
take the answer's length limit only as `max_completion_tokens` and sample only at temperature 1; Anthropic's
OpenAI layer takes `n = 1` only and returns one choice. Before the first step a probe of a few one-token requests
learns what the endpoint accepts; `teacher.api.*` the user set are taken as given and not probed."""

import asyncio
from dataclasses import asdict, replace

from prime_rl.config.evaluation import due_for_eval
from prime_rl.config.modes import RolloutSource, source_modes
from prime_rl.config.schema import Config, TeacherApiConfig, TeacherKind, TokenLimitField
from prime_rl.config.sources import rollouts_of
from prime_rl.inference.client import ChatReply, InferenceClient, InferenceError, Sampling
from prime_rl.teacher.cache import TeacherCache
from prime_rl.teacher.client import TeacherError, teacher_client

PROBE_MESSAGES = [{"role": "user", "content": "Say OK."}]
VLLM_API = TeacherApiConfig(TokenLimitField.max_tokens, multiple_choices=True, sampling_params=True)


def chat_payload(
    cfg: Config,
    model: str,
    messages: list[dict],
    n: int,
    sampling: Sampling,
    api: TeacherApiConfig,
    tools: list[dict] | None = None,
) -> dict:
    """A chat request in the form `api` says the endpoint accepts (teacher.extra_body first: ours win); `tools`:
    the JSON schemas of an episode's tools, offered in the OpenAI format (the endpoint chooses when to call)."""
    payload = {**cfg.teacher.extra_body, "model": model, "messages": messages}
    if tools:
        payload["tools"] = tools
    payload[api.token_limit_field.value] = sampling.max_tokens
    if n != 1:
        payload["n"] = n
    if api.sampling_params:
        payload.update(temperature=sampling.temperature, top_p=sampling.top_p)
    return payload


def is_resolved(api: TeacherApiConfig) -> bool:
    return api.token_limit_field != TokenLimitField.auto and None not in (api.multiple_choices, api.sampling_params)


def resolve_teacher_api(cfg: Config) -> Config:
    """The config with teacher.api learned (by the launcher, once, before any process starts)."""
    if cfg.teacher.kind == TeacherKind.none or is_resolved(cfg.teacher.api):
        return cfg
    return replace(cfg, teacher=replace(cfg.teacher, api=asyncio.run(resolved_api(cfg))))


async def resolved_api(cfg: Config) -> TeacherApiConfig:
    """A local vLLM teacher accepts everything and is not probed; an external endpoint is, unless the cache dir
    remembers its answers to the same questions."""
    if cfg.teacher.kind == TeacherKind.local_vllm:
        return VLLM_API
    if is_resolved(cfg.teacher.api):
        return cfg.teacher.api
    cache, question = TeacherCache.of(cfg), probe_question(cfg)
    known = cache.get("api", question) if cache else None
    if known:
        return api_of(known)
    client, model = teacher_client(cfg)
    try:
        api = await probe(cfg, client, model)
    finally:
        await client.close()
    if cache:
        cache.put("api", question, api_fields(api))
    return api


def api_fields(api: TeacherApiConfig) -> dict:
    return asdict(api) | {"token_limit_field": api.token_limit_field.value}


def api_of(fields: dict) -> TeacherApiConfig:
    return TeacherApiConfig(**fields | {"token_limit_field": TokenLimitField(fields["token_limit_field"])})


def probe_question(cfg: Config) -> dict:
    """What the probe's answer depends on: the settings it tests, and what the user fixed."""
    s = cfg.orchestrator.sampling
    return {
        "model": cfg.teacher.model,
        "api": api_fields(cfg.teacher.api),
        "temperatures": samplings(cfg),
        "top_p": s.top_p,
        "n": chat_n(cfg),
        "extra_body": cfg.teacher.extra_body,
    }


def samplings(cfg: Config) -> list[tuple[str, float]]:
    """The temperatures the run asks the teacher for: its rollouts' (sft), and its eval's at the first step."""
    train, evaluation = cfg.orchestrator.sampling.temperature, cfg.orchestrator.eval.temperature
    asked = [("orchestrator.sampling.temperature", train)]
    if due_for_eval(cfg, 0) and evaluation != train:
        asked.append(("orchestrator.eval.temperature", evaluation))
    return asked


def chat_n(cfg: Config) -> int:
    """The most answers one prompt needs from the teacher at once: the largest group of a source whose rollouts it
    writes (sft); opd asks for one (its eval)."""
    written = [rollouts_of(cfg, src) for _, src, mode in source_modes(cfg) if mode.rollouts == RolloutSource.teacher]
    return max(written, default=1)


async def probe(cfg: Config, client: InferenceClient, model: str) -> TeacherApiConfig:
    """Learn, in one-token requests, the length field, whether the sampling settings and n > 1 are accepted."""
    api, s = cfg.teacher.api, cfg.orchestrator.sampling
    base = {**cfg.teacher.extra_body, "model": model, "messages": PROBE_MESSAGES}
    field = api.token_limit_field
    if field == TokenLimitField.auto:
        field = await limit_field(client, base)
    base[field.value] = 1
    sampling_params = api.sampling_params
    for i, (keys, temperature) in enumerate(samplings(cfg) if sampling_params is None else []):
        reply, refusal = await attempt(client, base | {"temperature": temperature, "top_p": s.top_p})
        if i == 0:
            sampling_params = reply is not None  # refused at 1: the endpoint's default, 1, is what we want
        if refusal and (temperature, s.top_p) != (1.0, 1.0):
            raise TeacherError(
                f"teacher endpoint {client.base_url} refuses temperature={temperature:g} top_p={s.top_p:g} "
                f"for {model} ({refusal}); fix: set {keys}=1 orchestrator.sampling.top_p=1"
            )
    multiple, n = api.multiple_choices, chat_n(cfg)
    if multiple is None and n > 1:
        reply = (await attempt(client, base | {"n": n}))[0]
        multiple = reply is not None and len(reply.answers) == n  # fewer choices than asked: n is ignored
    return TeacherApiConfig(field, multiple_choices=bool(multiple), sampling_params=sampling_params)


async def limit_field(client: InferenceClient, base: dict) -> TokenLimitField:
    """The first field that caps the answer: OpenAI's current one, then the older one. An endpoint that ignores
    an unknown field answers a 1-token limit with more than one token and a natural stop, so it does not count."""
    refusals = []
    for field in (TokenLimitField.max_completion_tokens, TokenLimitField.max_tokens):
        reply, refusal = await attempt(client, base | {field.value: 1})
        if reply is not None and caps_at_one(reply):
            return field
        refusals.append(f"{field.value}: {refusal or 'ignored'}")
    raise TeacherError(
        f"teacher endpoint {client.base_url} honours neither length limit ({'; '.join(refusals)}); "
        "fix: set teacher.api.token_limit_field to the field it takes"
    )


def caps_at_one(reply: ChatReply) -> bool:
    tokens = reply.usage.get("completion_tokens")
    if isinstance(tokens, int):
        return tokens <= 1
    return all(a.finish_reason == "length" or len(a.text) <= 8 for a in reply.answers)


async def attempt(client: InferenceClient, payload: dict) -> tuple[ChatReply | None, str | None]:
    """(reply, None), or (None, the endpoint's reason) when it refuses the request as invalid (HTTP 400/422).
    Any other failure (a wrong key, an unknown model, no route) ends the probe: the run cannot go on."""
    try:
        return await client.chat(payload), None
    except InferenceError as e:
        if e.status in (400, 422):
            return None, str(e).split(": ", 1)[-1][:200]
        raise TeacherError(f"teacher endpoint {client.base_url} failed the probe: {e}") from e
