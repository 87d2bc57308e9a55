"""The teacher's chat requests against endpoints that behave like hosted APIs (tests/hosted_api.py, canned answers):
the capability probe, fan-out, rate limits, concurrency, usage and cost, the cache, reasoning output."""

import asyncio
import json
import subprocess
import time
from email.utils import formatdate

import httpx
import pytest

from prime_rl.config import compose_config
from prime_rl.config.schema import ReasoningMode, TokenLimitField
from prime_rl.inference.client import (
    ChatAnswer,
    InferenceClient,
    InferenceError,
    Sampling,
    parse_chat_choice,
    retry_after_s,
    should_retry,
)
from prime_rl.teacher.answers import TeacherAnswers, trained_text
from prime_rl.teacher.chat_api import VLLM_API, chat_payload, resolved_api
from prime_rl.teacher.client import TeacherError, teacher_client
from tests.conftest import ROOT, launch_cmd
from tests.hosted_api import ANTHROPIC, OPENAI_REASONING, HostedApi, Rules

KEY_ENV = "PRIME_RL_TEST_HOSTED_KEY"
SAMPLING = Sampling(temperature=1.0, top_p=1.0, max_tokens=8)
MESSAGES = [{"role": "user", "content": "reverse: abc"}]


@pytest.fixture
def hosted(request, monkeypatch):
    """An endpoint enforcing `request.param` (a Rules), with its key in KEY_ENV."""
    rules = request.param
    monkeypatch.setenv(KEY_ENV, rules.key or "unused")
    api = HostedApi(rules)
    yield api
    api.close()


def sft_config(api: HostedApi, *overrides: str):
    return compose_config(
        [
            "training_mode=sft",
            "teacher=external",
            f"teacher.base_url={api.url}",
            "teacher.model=hosted-model",
            f"teacher.api_key_env={KEY_ENV}",
            "orchestrator.batch_size=16",
            "orchestrator.rollouts_per_example=4",
            "teacher.max_retries=0",
            *overrides,
        ]
    )


def test_tools_are_offered_in_the_openai_format_and_the_calls_read_back_alike():
    cfg = compose_config(["training_mode=sft", "teacher=external", "teacher.base_url=http://127.0.0.1:1/v1"])
    schema = {"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {}}}}
    sampling, api = Sampling(1.0, 1.0, 8), VLLM_API
    assert chat_payload(cfg, "m", [], 1, sampling, api, tools=[schema])["tools"] == [schema]
    assert "tools" not in chat_payload(cfg, "m", [], 1, sampling, api)
    choice = {
        "message": {
            "content": None,  # a reply that only calls: OpenAI sends no text
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"key": "a"}'}},
                {"type": "function", "function": {"name": "get", "arguments": {"key": "b"}}},  # an object, no id
            ],
        },
        "finish_reason": "tool_calls",
    }
    answer = parse_chat_choice(choice)
    assert answer.text == "" and [c["id"] for c in answer.tool_calls] == ["c1", "call_1"]
    assert [json.loads(c["function"]["arguments"]) for c in answer.tool_calls] == [{"key": "a"}, {"key": "b"}]
    assert parse_chat_choice({"message": {"content": "hi"}}).tool_calls == []


def test_retry_after_is_read_in_seconds_and_as_a_date():
    def wait(value):
        return retry_after_s(httpx.Response(429, headers={"Retry-After": value} if value else {}))

    assert wait("7") == 7.0 and wait(None) is None and wait("soon") is None
    assert 28 <= wait(formatdate(time.time() + 30, usegmt=True)) <= 30
    in_ms = httpx.Response(429, headers={"retry-after-ms": "250", "Retry-After": "7"})
    assert retry_after_s(in_ms) == 0.25  # OpenAI's milliseconds win over the seconds


@pytest.mark.parametrize(
    ("status", "told", "retried"),
    [(500, None, True), (500, "false", False), (400, None, False), (400, "true", True), (429, "False", False)],
)
def test_x_should_retry_overrides_the_status(status, told, retried):
    assert should_retry(httpx.Response(status, headers={"x-should-retry": told} if told else {})) == retried


@pytest.mark.parametrize(
    ("hosted", "attempts", "answered"),
    [
        (Rules(server_errors=1, error_status=400, should_retry="true"), 2, True),  # a 400 the server says to retry
        (Rules(server_errors=1, should_retry="false"), 1, False),  # a 500 it says not to: failed at once
    ],
    indirect=["hosted"],
)
def test_the_client_retries_as_the_endpoint_says(hosted, attempts, answered):
    async def one() -> None:
        client = InferenceClient(hosted.url, max_retries=3, backoff_s=0.01)
        try:
            await client.post("/chat/completions", {"model": "m", "messages": MESSAGES})
        finally:
            await client.close()

    if answered:
        asyncio.run(one())
    else:
        with pytest.raises(InferenceError) as err:
            asyncio.run(one())
        assert err.value.status == 500
    assert hosted.seen.requests == attempts


@pytest.mark.parametrize(
    "hosted, expected",
    [
        (Rules(), (TokenLimitField.max_completion_tokens, True, True)),  # vLLM and most servers: everything
        (OPENAI_REASONING, (TokenLimitField.max_completion_tokens, True, True)),  # temperature 1 may be sent
        (ANTHROPIC, (TokenLimitField.max_completion_tokens, False, True)),  # n > 1 refused
        (Rules(n="ignore"), (TokenLimitField.max_completion_tokens, False, True)),  # n > 1 ignored: one choice
        (Rules(legacy_limit=True), (TokenLimitField.max_tokens, True, True)),  # the new field silently ignored
    ],
    indirect=["hosted"],
)
def test_the_probe_learns_what_the_endpoint_accepts(hosted, expected):
    api = asyncio.run(resolved_api(sft_config(hosted)))
    assert (api.token_limit_field, api.multiple_choices, api.sampling_params) == expected


@pytest.mark.integration
@pytest.mark.parametrize("hosted", [OPENAI_REASONING], indirect=True)
@pytest.mark.parametrize(
    "key, value", [("orchestrator.sampling.temperature", "0.7"), ("orchestrator.eval.temperature", "0")]
)
def test_a_sampling_setting_the_endpoint_refuses_stops_the_launch_before_anything_starts(hosted, tmp_path, key, value):
    run_dir = tmp_path / "run"
    cmd = launch_cmd(
        "training_mode=sft",
        "teacher=external",
        f"teacher.base_url={hosted.url}",
        "teacher.model=o4-mini",
        f"teacher.api_key_env={KEY_ENV}",
        f"{key}={value}",
        "monitor=off",
        f"hydra.run.dir={run_dir}",
    )
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    [line] = [x for x in run.stderr.splitlines() if x.startswith("error:")]
    # the temperature asked, the endpoint's own reason, and the setting it takes
    assert f"temperature={value}" in line and "Only 1 is supported" in line and f"{key}=1" in line, line
    assert not (run_dir / "configs").exists() and not (run_dir / "logs").exists()  # no process was started


@pytest.mark.parametrize("hosted", [Rules(key="the-right-key")], indirect=True)
def test_a_wrong_key_fails_the_probe_in_one_line(hosted, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "a-wrong-key")
    with pytest.raises(TeacherError) as e:
        asyncio.run(resolved_api(sft_config(hosted)))
    assert e.value.__cause__.status == 401  # the endpoint's refusal, as its InferenceError carries it


@pytest.mark.parametrize("hosted", [ANTHROPIC, Rules(n="ignore")], indirect=True)
def test_n_answers_from_an_endpoint_that_gives_one_per_request(hosted):
    """Probed: one request per sample. Told wrongly that n > 1 works: each short reply is followed by a request
    for the rest (against a refusing endpoint, the 400 fails the request instead)."""

    async def four(cfg) -> list[ChatAnswer]:
        client, model = teacher_client(cfg)
        answers = TeacherAnswers(cfg, client, model, await resolved_api(cfg))
        try:
            return await answers.sample(MESSAGES, 4, SAMPLING)
        finally:
            await client.close()

    assert [a.text for a in asyncio.run(four(sft_config(hosted)))] == ["OK."] * 4
    asked = [b.get("n", 1) for b in hosted.seen.bodies[-4:]]
    assert asked == [1, 1, 1, 1]
    if hosted.rules.n == "ignore":
        before = hosted.seen.answered
        asyncio.run(four(sft_config(hosted, "teacher.api.multiple_choices=true")))
        assert hosted.seen.answered - before == 2 + 4  # the probe's two (limit, sampling), 4 replies of one
        assert [b["n"] for b in hosted.seen.bodies[-4:-1]] == [4, 3, 2]
    else:
        with pytest.raises(InferenceError) as err:
            asyncio.run(four(sft_config(hosted, "teacher.api.multiple_choices=true")))
        assert err.value.status == 400


@pytest.mark.parametrize(
    "hosted",
    [Rules(rate_limit_every=2, retry_after_s=0.3), Rules(rate_limit_every=2, retry_after_s=0.3, retry_after_ms=True)],
    indirect=True,
    ids=["Retry-After", "retry-after-ms"],
)
def test_a_rate_limit_is_waited_out_as_told_and_uses_no_retry(hosted):
    async def three() -> InferenceClient:
        client = InferenceClient(hosted.url, max_retries=0)
        try:
            for _ in range(3):
                await client.post("/chat/completions", {"model": "m", "messages": MESSAGES})
        finally:
            await client.close()
        return client

    start = time.monotonic()
    client = asyncio.run(three())
    assert hosted.seen.rate_limited == client.stats.rate_limited == 2  # requests 2 and 4 (3 answered of 5)
    assert 0.6 <= client.stats.rate_limit_wait_s <= 0.6 * 1.1 + 1e-6
    assert time.monotonic() - start >= 0.6


@pytest.mark.parametrize("hosted", [Rules(rate_limit_every=1, retry_after_s=0.2)], indirect=True)
def test_a_rate_limit_that_never_ends_fails_once_its_budget_is_spent(hosted):
    async def one() -> None:
        client = InferenceClient(hosted.url, max_retries=0, rate_limit_wait_s=0.5)
        try:
            await client.post("/chat/completions", {"model": "m", "messages": MESSAGES})
        finally:
            await client.close()

    with pytest.raises(InferenceError) as err:
        asyncio.run(one())
    assert err.value.status == 429
    assert 2 <= hosted.seen.rate_limited <= 3


@pytest.mark.parametrize("hosted", [Rules(latency_s=0.2)], indirect=True)
def test_max_concurrency_bounds_the_requests_in_flight(hosted):
    async def many() -> None:
        client = InferenceClient(hosted.url, max_concurrency=3)
        try:
            body = {"model": "m", "messages": MESSAGES}
            await asyncio.gather(*(client.post("/chat/completions", body) for _ in range(12)))
        finally:
            await client.close()

    asyncio.run(many())
    assert hosted.seen.answered == 12 and hosted.seen.max_in_flight == 3


@pytest.mark.parametrize("hosted", [Rules(key="sk-cache-test-secret", n="ignore")], indirect=True)
def test_the_cache_answers_a_second_run_without_a_request_and_holds_no_key(hosted, tmp_path):
    """Usage is counted per step with the run's totals and cost; a second run over the same cache sends nothing,
    and a repeated prompt gets new answers (the next sample indices), not the ones it got before."""
    cfg = sft_config(
        hosted,
        f"teacher.cache_dir={tmp_path / 'cache'}",
        "teacher.price_per_mtok_in=2",
        "teacher.price_per_mtok_out=10",
    )

    async def run_twice() -> list[dict]:
        client, model = teacher_client(cfg)
        answers = TeacherAnswers(cfg, client, model, await resolved_api(cfg))
        try:
            await answers.sample(MESSAGES, 4, SAMPLING)
            first = answers.step_metrics()
            await answers.sample(MESSAGES, 4, SAMPLING)  # the same prompt again: samples 4-7
            return [first, answers.step_metrics()]
        finally:
            await client.close()

    first, second = asyncio.run(run_twice())
    assert first["teacher/requests"] == 4 and first["teacher/cache_hits"] == 0
    assert first["teacher/prompt_tokens"] == 4 * 9 and first["teacher/completion_tokens"] == 4 * 2
    assert first["teacher/cost_usd"] == pytest.approx((36 * 2 + 8 * 10) / 1e6)
    assert second["teacher/cache_hits"] == 0 and second["teacher/prompt_tokens_total"] == 8 * 9
    assert second["teacher/cost_usd_total"] == pytest.approx(2 * first["teacher/cost_usd"])
    sent = hosted.seen.requests

    again = asyncio.run(run_twice())
    assert hosted.seen.requests == sent  # not even the probe: its answer is cached too
    assert [m["teacher/cache_hits"] for m in again] == [4, 4] and again[1]["teacher/requests_total"] == 0
    assert again[1]["teacher/cost_usd_total"] == 0.0
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 8 + 1  # 8 answers and the probe's findings
    assert not [f for f in files if b"sk-cache-test-secret" in f.read_bytes()]
    entry = json.loads(next(f for f in files if "answers" in f.parts).read_text())
    assert entry["question"]["messages"] == MESSAGES and entry["answer"]["text"] == "OK."


@pytest.mark.parametrize("hosted", [Rules(reasoning="cba is abc reversed")], indirect=True)
def test_the_teacher_reasoning_is_dropped_or_kept_as_think_tags(hosted):
    async def one() -> ChatAnswer:
        cfg = sft_config(hosted)
        client, model = teacher_client(cfg)
        try:
            [answer] = await TeacherAnswers(cfg, client, model, await resolved_api(cfg)).sample(MESSAGES, 1, SAMPLING)
        finally:
            await client.close()
        return answer

    answer = asyncio.run(one())
    assert answer.reasoning == "cba is abc reversed"
    assert trained_text(answer, ReasoningMode.drop) == "OK."
    assert trained_text(answer, ReasoningMode.keep) == "<think>\ncba is abc reversed\n</think>\n\nOK."
    inline = ChatAnswer("<think>\nhmm\n</think>\n\ncba", "stop")  # a server without a reasoning parser
    assert trained_text(inline, ReasoningMode.drop) == "cba"
    assert trained_text(ChatAnswer("<think>\nstill thinking", "length"), ReasoningMode.drop) == ""


@pytest.mark.integration
def test_cache_entries_that_concurrent_jobs_write_are_read_whole(tmp_path):
    """Jobs of a sweep share the cache dir: two writers race on the same entries, and a reader meanwhile sees
    each entry absent or whole, never half written."""
    import sys

    from prime_rl.teacher.cache import TeacherCache

    writer = (
        "import sys; from pathlib import Path; from prime_rl.teacher.cache import TeacherCache\n"
        "cache = TeacherCache(Path(sys.argv[1]), 'endpoint#model')\n"
        "for _ in range(200):\n"
        "    for i in range(5):\n"
        "        cache.put('answers', {'index': i}, {'text': str(i) * 50000, 'finish_reason': 'stop'})\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", writer, str(tmp_path)], cwd=ROOT) for _ in range(2)]
    cache, seen = TeacherCache(tmp_path, "endpoint#model"), set()
    while any(w.poll() is None for w in writers):
        for i in range(5):
            answer = cache.get("answers", {"index": i})
            assert answer is None or answer["text"] == str(i) * 50000
            seen.add(answer is not None)
    assert [w.returncode for w in writers] == [0, 0] and True in seen
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]  # no temporary file is left
