"""sft for real from a teacher behind an endpoint that behaves like a hosted API (tests/hosted_api.py): the rules
of OpenAI's reasoning models and Anthropic's OpenAI layer, rate limits, transient faults and a key, in front of a
real vLLM teacher; and the secrets of a run (the teachers' keys, the run's own server key) that must reach no file."""

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from prime_rl.config import compose_config
from prime_rl.launcher.server_factory import FACTORY_ENV
from prime_rl.prepare import prepare_teacher
from tests.conftest import ROOT, launch_cmd
from tests.hosted_api import ANTHROPIC, OPENAI_REASONING, HostedApi, Rules
from tests.test_e2e_rl import launch, rows, summary
from tests.test_faults import started_roles, train_steps, wait_until
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


OPENAI_KEY_ENV, ANTHROPIC_KEY_ENV, TEAM_TOKEN_ENV = KEY_ENV, "PRIME_RL_TEST_ANTHROPIC_KEY", "PRIME_RL_TEST_TEAM_TOKEN"
TEAM_TOKEN = "team-token-1a2b3c4d5e6f"
# the built-in task under two labels, each answered by a teacher behind one provider's rules: `teacher` and a named one
TWO_PROVIDERS = "task.mix=[{name:reverse,label:openai_part},{name:reverse,label:anthropic_part,teacher:anthropic}]"


@pytest.mark.vllm
def test_sft_from_two_providers_at_once_each_by_its_rules_and_no_secret_leaves_the_processes(
    tmp_path, upstream, monkeypatch
):
    """One sft run, each source answered by its own hosted teacher: `teacher` behind OpenAI's reasoning-model rules
    (max_completion_tokens only, temperature 1 only; a team header from its env var; its first 3 requests fail with
    HTTP 500, retried away) and a named teacher behind Anthropic's (n > 1 refused: fanned out). Every request fits
    its provider's rules and carries its key. Meanwhile the run's own servers answer only with the run's key (on
    every route but /health) and listen on 127.0.0.1 only; each secret reaches only the process that needs it, and
    none is in any file of the run dir (configs, Hydra's dumps, logs, W&B's offline files) or the launcher's output."""
    openai_rules = replace(OPENAI_REASONING, server_errors=3)
    openai, anthropic = HostedApi(openai_rules, upstream), HostedApi(ANTHROPIC, upstream)
    monkeypatch.setenv(OPENAI_KEY_ENV, openai_rules.key)
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC.key)
    monkeypatch.setenv(TEAM_TOKEN_ENV, TEAM_TOKEN)
    named = (
        f"++teachers={{anthropic:{{kind:external,model:hosted-teacher,base_url:'{anthropic.url}',"
        f"api_key_env:{ANTHROPIC_KEY_ENV}}}}}"
    )
    run_dir = tmp_path / "run"
    cmd = launch_cmd(
        *sft_through(openai, "orchestrator.rollouts_per_example=4", "task=mix", TWO_PROVIDERS, named),
        "teacher.max_tokens=24",  # a reasoning model's answers get their own length cap
        f"+teacher.header_envs.X-Team-Token={TEAM_TOKEN_ENV}",
        "teacher.max_retries=5",
        "max_steps=2", "orchestrator.eval.interval=0", "orchestrator.log_samples=128", "monitor.samples_interval=1",
        "monitor.wandb.mode=offline",  # its files are searched for secrets too
        f"hydra.run.dir={run_dir}",
    )  # fmt: skip
    # no server factory: each role's environment is read from /proc, where a forked server shows the factory's
    monkeypatch.delenv(FACTORY_ENV, raising=False)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(train_steps(run_dir)) >= 1, proc, 300, "step 0")
        roles = started_roles(run_dir)
        server_key = environ(roles["inference"])["VLLM_API_KEY"]
        port = int((run_dir / "servers" / "inference.url").read_text().removesuffix("/v1").rsplit(":", 1)[1])
        models = f"http://127.0.0.1:{port}/v1/models"
        anonymous = httpx.get(models).status_code
        with_key = httpx.get(models, headers={"Authorization": f"Bearer {server_key}"}).status_code
        # vLLM guards only /v1; our middleware guards the dev-mode control routes too (not /health)
        root = f"http://127.0.0.1:{port}"
        control = [httpx.post(f"{root}/{path}").status_code for path in ("collective_rpc", "reset_prefix_cache")]
        health = httpx.get(f"{root}/health").status_code
        bound_to = listening_address(port)
        envs = {role: environ(pid) for role, pid in roles.items()}
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
        openai.close()
        anthropic.close()
    assert proc.returncode == 0, err[-3000:]
    train = [r for r in rows(run_dir) if "loss" in r]
    assert [r["step"] for r in train] == [0, 1]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {(s["source"], s["teacher"]) for s in samples} == {
        ("openai_part", "hosted-teacher"),
        ("anthropic_part", "teachers.anthropic"),
    }
    for api, metric in ((openai, "teacher/"), (anthropic, "teacher/anthropic/")):
        sent = api.run_requests()
        assert [status for _, status, _ in sent if status not in (200, 429)] == []  # every request fits the rules
        assert sum(r[f"{metric}requests"] for r in train) == len(sent)
        assert sum(r[f"{metric}rate_limited"] for r in train) == sum(status == 429 for _, status, _ in sent)
        used = sum(u.get("prompt_tokens", 0) for _, _, u in sent)
        assert sum(r[f"{metric}prompt_tokens"] for r in train) == used
    assert [status for _, status, _ in openai.seen.log[:3]] == [500] * 3  # retried: the probe went through after
    assert all("max_tokens" not in b and b["max_completion_tokens"] == 24 for b, _, _ in openai.run_requests())
    assert all(b.get("n", 1) == 1 for b, _, _ in anthropic.run_requests())
    for step, r in enumerate(train):  # one request per answer: n was fanned out
        answers = sum(s["step"] == step and s["source"] == "anthropic_part" for s in samples)
        assert r["teacher/anthropic/requests"] - r["teacher/anthropic/rate_limited"] == answers, (step, answers)
    assert {h.get("Authorization") for h in openai.seen.headers} == {f"Bearer {openai_rules.key}"}
    assert {h.get("Authorization") for h in anthropic.seen.headers} == {f"Bearer {ANTHROPIC.key}"}
    assert {h.get("X-Team-Token") for h in openai.seen.headers} == {TEAM_TOKEN}  # its value from its env var

    assert len(server_key) >= 32 and (anonymous, with_key) == (401, 200)
    assert control == [401, 401] and health == 200
    assert bound_to == "127.0.0.1"
    assert "VLLM_API_KEY" not in envs["trainer"]  # the run's key goes to the servers and the orchestrator only
    # the teachers' secrets go to the orchestrator only
    secret_envs = {OPENAI_KEY_ENV, ANTHROPIC_KEY_ENV, TEAM_TOKEN_ENV}
    assert [role for role, env in envs.items() if secret_envs & set(env)] == ["orchestrator"]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(".hydra" in p.parts for p in files) and any("wandb" in p.parts for p in files)
    for value in (openai_rules.key, ANTHROPIC.key, TEAM_TOKEN, server_key):
        assert [p for p in files if value.encode() in p.read_bytes()] == []
        assert value not in out + err


def listening_address(port: int) -> str:
    """The local address a LISTEN socket on `port` is bound to, from /proc/net/tcp (hex, little endian)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, p = local.split(":")
        if int(p, 16) == port and state == "0A":
            return ".".join(str(int(addr[i : i + 2], 16)) for i in (6, 4, 2, 0))
    return ""


def environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").split("=", 1) for e in entries if b"=" in e)


@pytest.mark.vllm
def test_sft_through_a_hosted_api_with_every_rule_trains_on_whole_answers_counts_cost_and_caches(
    tmp_path, upstream, monkeypatch, standing_servers
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
        first = launch(
            tmp_path / "first", *common, "max_steps=4", "orchestrator.eval.interval=0", standing=standing_servers
        )
        sent = api.seen.requests
        again = launch(
            tmp_path / "again", *common, "max_steps=3", "orchestrator.eval.interval=0", standing=standing_servers
        )
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
