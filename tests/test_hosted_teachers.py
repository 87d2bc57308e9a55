"""sft for real from a teacher behind an endpoint that behaves like a hosted API (tests/hosted_api.py): the rules
of OpenAI's reasoning models and Anthropic's OpenAI layer, rate limits and a key, in front of a real vLLM teacher."""

import pytest

from prime_rl.config import compose_config
from prime_rl.prepare import prepare_teacher
from tests.hosted_api import ANTHROPIC, OPENAI_REASONING, HostedApi, Rules
from tests.test_e2e_rl import launch, rows, summary
from tests.vllm_server import serve

KEY_ENV = "PRIME_RL_TEST_HOSTED_KEY"
PRICE_IN, PRICE_OUT = 1.1, 4.4  # USD per million tokens


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """The built-in tiny teacher in a vLLM server, shared by the module's hosted endpoints."""
    teacher = prepare_teacher(compose_config(["training_mode=sft"]))
    with serve(teacher, tmp_path_factory.mktemp("upstream"), served_name="tiny-teacher", student=False) as url:
        yield url


def sft_through(api: HostedApi, *overrides: str) -> list[str]:
    return [
        "experiment=sft_external",
        f"teacher.base_url={api.url}",
        "teacher.model=hosted-teacher",
        f"teacher.api_key_env={KEY_ENV}",
        "orchestrator.batch_size=128",
        *overrides,
    ]


@pytest.mark.vllm
@pytest.mark.parametrize("rules", [OPENAI_REASONING, ANTHROPIC], ids=["openai", "anthropic"])
def test_sft_finishes_against_each_providers_rules(tmp_path, upstream, monkeypatch, rules):
    monkeypatch.setenv(KEY_ENV, rules.key)
    api = HostedApi(rules, upstream)
    try:
        run = launch(
            tmp_path / "run",
            *sft_through(
                api,
                "orchestrator.rollouts_per_example=4",
                "max_steps=2",
                "orchestrator.eval.interval=0",
                "monitor=off",
                "teacher.max_tokens=24",  # a reasoning model's answers get their own length cap
            ),
        )
    finally:
        api.close()
    assert run.returncode == 0, run.stderr[-3000:]
    train = [r for r in rows(tmp_path / "run") if "loss" in r]
    assert [r["step"] for r in train] == [0, 1]
    sent = api.run_requests()
    assert [status for _, status, _ in sent if status not in (200, 429)] == []  # every request fits the rules
    assert sum(r["teacher/requests"] for r in train) == len(sent)
    assert sum(r["teacher/rate_limited"] for r in train) == sum(status == 429 for _, status, _ in sent)
    assert sum(r["teacher/prompt_tokens"] for r in train) == sum(u.get("prompt_tokens", 0) for _, _, u in sent)
    bodies = [body for body, _, _ in sent]
    if rules.n == "refuse":
        assert all(b.get("n", 1) == 1 for b in bodies)
        assert [r["teacher/requests"] - r["teacher/rate_limited"] for r in train] == [128, 128]  # fanned out
    if rules.completion_tokens_only:
        assert all("max_tokens" not in b and b["max_completion_tokens"] == 24 for b in bodies)


@pytest.mark.vllm
def test_sft_through_a_hosted_api_with_every_rule_trains_on_whole_answers_counts_cost_and_caches(
    tmp_path, upstream, monkeypatch
):
    """Every rule at once (a key, max_completion_tokens only, temperature 1 only, one choice whatever n, a 429 with
    Retry-After every 10th request), 2 answers per prompt: the teacher's answers reach the batch whole (its
    rollouts score as the teacher does), usage and cost are logged per step and in summary.json, concurrency stays
    bounded; a second run over the cache sends no request at all. That sft learns from such answers is
    test_sft_from_the_local_teacher_learns (tests/test_e2e_teachers.py); its learning curve, BENCHMARKS.md."""
    rules = Rules(
        key="sk-hosted-e2e-7c1d9a",
        completion_tokens_only=True,
        default_sampling_only=True,
        n="ignore",
        rate_limit_every=10,
        retry_after_s=0.5,
    )
    monkeypatch.setenv(KEY_ENV, rules.key)
    api = HostedApi(rules, upstream)
    cache = tmp_path / "cache"
    common = sft_through(
        api,
        "orchestrator.rollouts_per_example=2",
        "teacher.max_concurrency=8",
        f"teacher.price_per_mtok_in={PRICE_IN}",
        f"teacher.price_per_mtok_out={PRICE_OUT}",
        f"teacher.cache_dir={cache}",
    )
    try:
        first = launch(tmp_path / "first", *common, "max_steps=4", "orchestrator.eval.interval=0")
        sent = api.seen.requests
        again = launch(tmp_path / "again", *common, "max_steps=3", "orchestrator.eval.interval=0")
    finally:
        api.close()
    assert first.returncode == 0, first.stderr[-3000:]
    s = summary(tmp_path / "first")
    train = [r for r in rows(tmp_path / "first") if "loss" in r]
    assert [r["step"] for r in train] == [0, 1, 2, 3]
    # the tiny teacher's answers are right (eval reward 1.00): cut, garbled or misplaced text would score lower
    assert all(r["reward/mean"] > 0.9 for r in train), [r["reward/mean"] for r in train]
    assert all(r["teacher/completion_tokens"] > 0 and r["teacher/prompt_tokens"] > 0 for r in train)
    used = [u for _, status, u in api.run_requests() if status == 200]
    assert s["teacher/prompt_tokens_total"] == sum(u["prompt_tokens"] for u in used)
    assert s["teacher/completion_tokens_total"] == sum(u["completion_tokens"] for u in used)
    cost = (s["teacher/prompt_tokens_total"] * PRICE_IN + s["teacher/completion_tokens_total"] * PRICE_OUT) / 1e6
    assert s["teacher/cost_usd_total"] == pytest.approx(cost)
    assert sum(r["teacher/rate_limited"] for r in train) >= 5 and api.seen.max_in_flight <= 8
    assert all(r["teacher/rate_limit_wait_s"] >= r["teacher/rate_limited"] * rules.retry_after_s for r in train)
    assert all(b.get("temperature", 1) == 1 and "max_tokens" not in b for b in api.seen.bodies)
    assert [status for _, status, _ in api.run_requests() if status not in (200, 429)] == []

    assert again.returncode == 0, again.stderr[-3000:]
    assert api.seen.requests == sent  # the cache answered everything, the probe included
    train = [r for r in rows(tmp_path / "again") if "loss" in r]
    assert [r["teacher/cache_hits"] for r in train] == [128, 128, 128]
    assert all(r["teacher/requests"] == 0 for r in train) and summary(tmp_path / "again")["teacher/cost_usd_total"] == 0
    assert not [f for f in cache.rglob("*") if f.is_file() and rules.key.encode() in f.read_bytes()]
