"""Multi-turn episodes (task=gym): the token bridge between turns, the Gymnasium text API and its failures, and
real rl and opd runs whose episodes are played against a real vLLM server, token for token."""

import asyncio
import json
import re
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from prime_rl.config import compose_config
from prime_rl.config.user_error import ConfigError, UserError
from prime_rl.inference.server import vllm_command
from prime_rl.launcher.preflight.tokenizers import check_teacher_tool_calls
from prime_rl.models.chat import (
    answer_ids,
    end_of_turn_id,
    next_turn_ids,
    prompt_ids,
    renders_tool_calls,
    student_tokenizer,
    transcript_ids,
)
from prime_rl.models.tokenizer import build_bpe_tokenizer, build_tokenizer
from prime_rl.orchestrator.env_pool import EnvPool, call_in_thread
from prime_rl.orchestrator.episodes import EnvFailed, play_episodes
from prime_rl.orchestrator.tool_calls import ToolReader, answer
from prime_rl.tasks import load_task
from prime_rl.tasks.gym_env import EnvProtocolError, observation_of, outcome_of, tool_schemas
from prime_rl.tasks.lookup_env import Lookup
from prime_rl.tasks.retry_env import ReverseRetry
from tests.conftest import ROOT
from tests.envs import HANG_S
from tests.standing_servers import StandingServers
from tests.test_e2e_rl import launch, rows

REQUEST = {"role": "user", "content": "reverse: abc"}


def render(tokenizer, messages: list[dict]) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False))


@pytest.mark.parametrize("family", ["char", "bpe with a default system turn"])
def test_the_next_prompt_is_the_last_one_plus_the_sampled_ids_plus_the_new_turn_as_the_template_renders_it(family):
    tok = build_tokenizer() if family == "char" else build_bpe_tokenizer([[REQUEST]] * 50, 400)
    sampled = tok.encode("cba", add_special_tokens=False) + [end_of_turn_id(tok)]
    first = prompt_ids(tok, [REQUEST])
    bridge = next_turn_ids(tok, [REQUEST], [REQUEST], sampled)
    assert first + sampled + bridge == render(tok, [REQUEST, {"role": "assistant", "content": "cba"}, REQUEST])
    assert "system" not in tok.decode(bridge)  # the new turn alone would open with the template's default one


def test_sampled_ids_a_render_would_merge_stay_as_sampled_and_a_cut_reply_gets_its_end_of_turn():
    tok = build_tokenizer()
    sampled = [tok.convert_tokens_to_ids(c) for c in "sort:"] + tok.encode(" x", add_special_tokens=False)
    assert tok.encode("sort: x", add_special_tokens=False) != sampled  # re-rendered, `sort: ` is one word token
    bridge = next_turn_ids(tok, [REQUEST], [REQUEST], sampled)  # cut by max_tokens: no end of turn sampled
    assert bridge[0] == end_of_turn_id(tok)
    assert tok.decode(bridge) == "<|im_end|>\n<|im_start|>user\nreverse: abc<|im_end|>\n<|im_start|>assistant\n"


def test_a_demonstration_becomes_one_episode_whose_assistant_turns_alone_train():
    tok, env = build_tokenizer(), Lookup()
    observation, _ = env.reset(seed=5)
    messages = [{"role": "user", "content": observation}, *env.demonstration()]
    tools = tool_schemas(env)
    prompt, ids, mask = transcript_ids(tok, messages, tools)
    assert tok.decode(prompt).startswith("<|im_start|>system\ntools: get(key)<|im_end|>")
    assert tok.decode(prompt + ids) + "\n" == tok.apply_chat_template(messages, tools=tools, tokenize=False)
    trained = [tok.decode(run) for is_trained, run in segments(ids, mask) if is_trained]
    assert trained == [messages[1]["content"] + "<|im_end|>", env.value + "<|im_end|>"]


@pytest.mark.parametrize("family", ["char", "bpe with a default system turn"])
def test_a_chat_endpoints_tool_call_tokenizes_as_the_student_writes_its_own(family):
    """sft on episodes: the teacher's calls come back as OpenAI tool_calls; the student's template writes them in
    its own call format, so the student learns the call it will make, token for token."""
    tok = build_tokenizer() if family == "char" else build_bpe_tokenizer([[REQUEST]] * 50, 400)
    env = Lookup()
    observation, _ = env.reset(seed=5)
    prompt, tools = [{"role": "user", "content": observation}], tool_schemas(env)
    written = env.demonstration()[0]["content"]  # <tool_call>{"name": "get", …}</tool_call>, as a student samples it
    call = {"id": "call_0", "type": "function", "function": {"name": "get", "arguments": json.dumps({"key": env.key})}}
    returned = {"role": "assistant", "content": None, "tool_calls": [call]}
    assert answer_ids(tok, prompt, returned, tools=tools) == answer_ids(tok, prompt, written, tools=tools)
    assert renders_tool_calls(tok)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # a template without tool calls
    assert not renders_tool_calls(tok)


def test_sft_with_tools_needs_a_student_template_that_writes_tool_calls_and_a_teacher_server_that_reads_them():
    sft = compose_config(["training_mode=sft", "task=lookup"])
    tok = build_tokenizer()
    check_teacher_tool_calls(sft, lambda: tok)  # the built-in template writes them (the loader: the student's)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(UserError) as err:
        check_teacher_tool_calls(sft, lambda: tok)
    assert err.value.keys == ["model.name"] and "\n" not in str(err.value)
    check_teacher_tool_calls(
        compose_config(["training_mode=opd", "task=lookup"]), lambda: tok
    )  # the student writes its calls

    def argv(cfg, student: bool) -> str:
        return " ".join(vllm_command(cfg, ROOT, "m", 8000, [], 0, student)[0])

    assert "--enable-auto-tool-choice --tool-call-parser hermes" in argv(sft, student=False)
    assert "--tool-call-parser" not in argv(sft, student=True)
    assert "--tool-call-parser" not in argv(compose_config(["training_mode=opd", "task=lookup"]), student=False)
    assert "--tool-call-parser" not in argv(compose_config(["training_mode=sft"]), student=False)


@pytest.mark.integration
def test_tool_calls_are_read_in_the_models_format_and_a_bad_one_is_answered_not_raised():
    env = Lookup()
    env.reset(seed=1)
    reader, tools = ToolReader("hermes", build_tokenizer()), {"get": env.get}
    call = f'<tool_call>{{"name": "get", "arguments": {{"key": "{env.key}"}}}}</tool_call>'
    assert reader.calls(call) == [("get", json.dumps({"key": env.key}))]
    assert reader.calls('<tool_call>{"name": "get", "argu') == []  # a call that cannot be read
    assert reader.calls(env.value) is None  # no call: an answer for step()

    def answered(name: str, arguments: str) -> tuple[str, bool]:
        return asyncio.run(answer((name, arguments), tools, 1.0))

    assert answered("get", json.dumps({"key": env.key})) == (env.value, False)
    assert answered("put", "{}") == ("invalid tool call: no tool 'put' (tools: get)", True)
    assert answered("get", '{"name": "x"}') == ("invalid tool call: missing a required argument: 'key'", True)
    assert answered("get", "[1]")[0].startswith("invalid tool call:")
    assert answered("get", "not json")[0].startswith("invalid tool call: Expecting value")
    tools["get"] = lambda key: 1 / 0
    assert answered("get", '{"key": "a"}') == ("tool error: division by zero", True)


def test_the_text_api_is_checked_value_by_value():
    assert observation_of(("reverse: abc", {})) == "reverse: abc"
    assert outcome_of(("next", 1, False, True, {})) == ("next", 1.0, True)
    for bad, says in [
        ("reverse: abc", "not (observation, info)"),
        ((123, {}), "not a str"),
    ]:
        with pytest.raises(EnvProtocolError, match=re.escape(says)):
            observation_of(bad)
    for bad, says in [
        (("x", 1.0, False), "not (observation, reward"),
        (("x", float("nan"), False, False, {}), "not a finite number"),
        (("x", True, False, False, {}), "not a finite number"),
        ((None, 0.0, False, False, {}), "not a str"),
    ]:
        with pytest.raises(EnvProtocolError, match=re.escape(says)):
            outcome_of(bad)


def test_the_built_in_environment_asks_again_until_the_reply_is_exact_or_the_tries_run_out():
    env = ReverseRetry(tries=2)
    first, _ = env.reset(seed=7)
    word = first.removeprefix("reverse: ")
    assert env.reset(seed=7)[0] == first  # a seed is an instance
    assert env.step("nope") == (first, 0.0, False, False, {})
    observation, reward, terminated, truncated, _ = env.step(word[::-1][:-1])  # the last try, nearly right
    assert (terminated, truncated) == (False, True) and 0.5 < reward < 1.0
    env.reset(seed=7)
    assert env.step(f" {word[::-1]}\n")[1:3] == (1.0, True)


def test_the_example_environment_is_playable_to_the_end_by_bisection(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from guess_number import GuessNumber

    env = GuessNumber(high=100, guesses=7)
    env.reset(seed=3)
    low, high, reward, done = 1, 100, 0.0, False
    while not done:
        guess = (low + high) // 2
        hint, reward, terminated, truncated, _ = env.step(f"I guess {guess}")
        low, high = (guess + 1, high) if hint == "Higher." else (low, guess - 1)
        done = terminated or truncated
    assert reward == 1.0 and terminated


@pytest.mark.parametrize(
    "overrides, keys, says",
    [
        (["task.env=no_such_module:make"], ["task.env"], "cannot import 'no_such_module'"),
        (["task.env=prime_rl.tasks.retry_env:NoSuch"], ["task.env"], "has no callable 'NoSuch'"),
        (["task.env=prime_rl.tasks.retry_env"], ["task.env"], "is not <module>:<factory>"),
        (["task.env=tests.envs:NotAnEnvironment", "~task.options.tries"], ["task.env"], "without reset() or step()"),
        (["task.env=tests.envs:Broken"], ["task.env"], "reset(seed=0) failed: the environment cannot start"),
        (["+task.options.lives=3"], ["task.options"], "unexpected keyword argument 'lives'"),
        (["task.options.tries=0"], ["task.options"], "need tries >= 1"),
        (["task.max_turns=0"], ["task.max_turns"], "must be >= 1"),
    ],
)
def test_a_factory_that_cannot_make_the_environment_is_one_config_error(overrides, keys, says):
    cfg = compose_config(["task=retry", *overrides])
    with pytest.raises(ConfigError) as e:
        load_task(cfg.task)
    assert e.value.keys == keys and says in e.value.problem


def test_a_gym_task_is_a_list_of_seeds_played_from_reset():
    task = load_task(compose_config(["task=retry", "task.num_train=5", "task.num_eval=3", "task.seed=2"]).task)
    seeds = [ex.env.seed for ex in task.train + task.eval]
    assert seeds == [2_000_000 + i for i in range(8)]  # eval seeds follow the train seeds
    assert {ex.env.max_turns for ex in task.train} == {3}


def test_an_environment_call_is_limited_in_time_and_its_error_comes_back():
    async def calls():
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await call_in_thread(lambda: time.sleep(HANG_S), 0.2)
        assert time.monotonic() - start < 1.0  # the event loop went on; the thread is left to finish
        with pytest.raises(ZeroDivisionError):
            await call_in_thread(lambda: 1 / 0, 1.0)
        assert await call_in_thread(lambda: 42, 1.0) == 42

    asyncio.run(calls())


def test_a_step_whose_every_episode_failed_stops_the_run(capsys):
    cfg = compose_config(["task=retry"])
    broken = [replace(ex, env=replace(ex.env, factory="tests.envs:Broken")) for ex in load_task(cfg.task).train[:2]]
    ctx = SimpleNamespace(cfg=cfg, envs=EnvPool(), tokenizer=None)  # no episode gets as far as a prompt
    with pytest.raises(EnvFailed, match="every one of 4 episodes failed"):
        asyncio.run(play_episodes(ctx, broken, 2, SimpleNamespace(max_tokens=16)))
    assert capsys.readouterr().err.count("environment error") == 1  # the first traceback, once


# ---------------------------------------------------------------- real runs

ON_POLICY = ["deployment=colocated", "orchestrator.max_async_level=0", "monitor=off"]
SMALL = [
    "orchestrator.batch_size=32",
    "orchestrator.rollouts_per_example=4",
    "orchestrator.eval.num_examples=16",
    *ON_POLICY,
]
BRIDGE = re.compile(
    r"^(<\|im_end\|>)?\n<\|im_start\|>user\n(?:reverse: )?([a-z, ]+)<\|im_end\|>\n<\|im_start\|>assistant\n$"
)


def segments(ids: list[int], mask: list[bool]) -> list[tuple[bool, list[int]]]:
    """Runs of ids with the same mask value: (trained, ids)."""
    runs: list[tuple[bool, list[int]]] = []
    for i, m in zip(ids, mask):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(i)
        else:
            runs.append((m, [i]))
    return runs


def three_steps(run_dir, *overrides: str, standing: StandingServers | None = None) -> tuple[list[dict], list[dict]]:
    """Three on-policy steps of 8 prompts x 4 episodes, every sample logged: (the train rows, samples.jsonl). On
    policy in float32, mismatch_kl ~0 says the trainer computed every sampled token in the very context the server
    sampled it in: a turn whose prompt differed from what the episode holds would show."""
    run = launch(run_dir, *overrides, "debug=smoke", "orchestrator.log_samples=32", *SMALL, standing=standing)
    assert run.returncode == 0, run.stderr[-3000:]
    train = [r for r in rows(run_dir) if "loss" in r]
    assert len(train) == 3
    assert max(abs(r["mismatch_kl"]) for r in train) < 1e-6, [r["mismatch_kl"] for r in train]
    return train, [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def between_replies(tokenizer, sample: dict) -> list[str]:
    """The text of each run of untrained tokens after the first prompt: what the episode put between replies."""
    mask = sample["loss_mask"] or [True] * len(sample["completion_ids"])
    return [tokenizer.decode(ids) for trained, ids in segments(sample["completion_ids"], mask) if not trained]


@pytest.mark.vllm
def test_opd_plays_episodes_token_for_token_and_survives_an_environment_that_raises_hangs_or_breaks_the_api(
    tmp_path, monkeypatch, standing_servers
):
    """The built-in retry task beside tests.envs:Faulty, whose failures (a reset or a step that raises, hangs or
    breaks the API) end only their own episodes, and a verifiers environment (examples/reverse_retry_game.py: its
    Env.run asks again after a wrong reply, its trace scores the episode); opd with the episodes' rewards too
    (adv_tau 1): the teacher scores each whole episode, the student's tokens alone train, an episode that never
    started is not scored."""
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{ROOT / 'examples'}")  # tests.envs and the game, for the orchestrator
    run_dir = tmp_path / "run"
    retry = "{name:gym,env:prime_rl.tasks.retry_env:ReverseRetry,max_turns:3,options:{tries:3},weight:3,label:retry}"
    faulty = "{name:gym,env:tests.envs:Faulty,max_turns:3,env_timeout_s:1,label:faulty}"
    game = "{name:verifiers,env:reverse_retry_game,max_turns:3,label:game}"
    warm_start = ["model.warm_start.task=reverse", "teacher.warm_start.task=reverse"]
    mix = f"task.mix=[{retry},{faulty},{game}]"
    train, samples = three_steps(run_dir, "task=mix", mix, "training_mode=opd", *warm_start, standing=standing_servers)
    assert sum(r["env/turns"] for r in train) / 3 > 1.5  # the tiny student needs more than one try, mostly
    assert all(r["teacher_kl"] != 0 and "reward/mean" in r for r in train)
    assert sum(r["env/errors"] for r in train) >= 1 and sum(r["env/timeouts"] for r in train) >= 1
    for r in train:  # every episode ended one way or another
        failed = (r["env/errors"] + r["env/timeouts"]) / 32
        assert sum(r[f"env/end/{why}"] for why in ("done", "max_turns", "context")) + failed == pytest.approx(1)
        assert r["env/env_tokens"] > 0
    assert all("reward/retry" in r for r in train)  # a source's reward, in the steps that drew it: its played
    for r in (r for r in train if "env/faulty/turns" in r):  # episodes', none when every one of them failed
        played = sum(r[f"env/faulty/end/{why}"] for why in ("done", "max_turns", "context"))
        assert ("reward/faulty" in r) == (played > 0), r
    failures = [r["env/errors"] + r["env/timeouts"] for r in train]  # and its episodes' metrics: all its failures
    assert [r.get("env/faulty/errors", 0) + r.get("env/faulty/timeouts", 0) for r in train] == failures
    assert all(r.get("env/retry/errors", 0) == 0 and r["env/retry/turns"] >= 1 for r in train)
    game_steps = [r for r in train if "env/game/turns" in r]  # the verifiers game: played and scored, never failed
    assert game_steps and all(r["env/game/errors"] == 0 and 0 <= r["reward/game"] <= 1 for r in game_steps)
    assert max(r["env/game/turns"] for r in game_steps) > 1
    log = (run_dir / "logs" / "orchestrator.log").read_text()
    assert log.count("environment error (reward 0") == 1  # the first traceback; the others are counted
    evals = [r for r in rows(run_dir) if "eval/reward" in r]
    assert [r["step"] for r in evals] == [0, 3] and all(1 <= r["eval/env/turns"] <= 3 for r in evals)

    tokenizer = student_tokenizer(compose_config(warm_start))
    assert len(samples) == 3 * 32
    for s in samples:
        if not s["completion_ids"] or (s["loss_mask"] is not None and not any(s["loss_mask"])):
            assert s["failed"] and s["reward"] == 0.0  # an episode the environment broke (or never started): nothing
            assert s["advantage"] == 0.0  # trains, and its 0 is no baseline for the episodes of its group
            continue
        word = re.search(r"reverse: ([a-z]+)", s["prompt"]).group(1)
        for text in between_replies(tokenizer, s):  # the end of the reply's turn, then the request again
            bridge = BRIDGE.match(text)
            assert bridge and bridge.group(2) == (word if s["source"] == "retry" else "wrong, try again"), text
    assert any(between_replies(tokenizer, s) for s in samples)


LOOKUP = ["task=lookup", "model.warm_start.steps=120"]  # briefly: its calls are well-formed, its keys mostly wrong
# the built-in lookup environment and examples/vault_lookup.py (a verifiers taskset with a toolset), each played by
# the student (rl) and by the teacher (sft), with conf/task/lookup.yaml's knobs; student and teacher are one build,
# warm-started on lookup's demonstrations: their calls are well-formed, their keys often wrong
PLAYERS = {"lookup": "rl", "vault": "rl", "lookup_sft": "sft", "vault_sft": "sft"}
LOOKUP_AND_VAULT = [
    "task=mix",
    "task.mix=[{name:gym,env:prime_rl.tasks.lookup_env:Lookup,max_turns:3,label:lookup},"
    "{name:verifiers,env:vault_lookup,max_turns:3,label:vault},"
    "{name:gym,env:prime_rl.tasks.lookup_env:Lookup,max_turns:3,label:lookup_sft,mode:sft},"
    "{name:verifiers,env:vault_lookup,max_turns:3,label:vault_sft,mode:sft}]",
    "orchestrator.sampling.max_tokens=64",
    "trainer.optim.lr=1e-4",
    "model.warm_start.task=lookup",
    "model.warm_start.steps=120",
    "teacher=local_vllm",
    "teacher.warm_start.task=lookup",
    "teacher.warm_start.steps=120",
    "teacher.warm_start.lr=1e-3",  # conf/task/lookup.yaml's: the same build as the student's
    "teacher.warm_start.schedule=constant",
]


@pytest.mark.vllm
def test_tool_calls_run_with_their_arguments_in_gym_and_verifiers_toolsets_whether_the_student_or_the_teacher_plays(
    tmp_path, monkeypatch
):
    """Both tools, each in an rl source (the student plays) and an sft source (the local teacher plays). The student
    calls `get` in the hermes format; the orchestrator reads each call with vLLM's parser and runs it with the call's
    own arguments, and the tool's answer is the next turn's context. The teacher (a vLLM server with lookup's tool
    parser) plays through chat completions with the `get` tool: its calls come back as tool_calls and run, their
    results go back as tool messages, and the student trains on the teacher's turns alone, each in the student's
    tokens (a call in the format the student itself would write), the tool's turns context. The vault's tool
    serves in-process (tasks/verifiers_tools.py) and leaves its count in the trace's state, which one of the
    task's rewards reads."""
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{ROOT / 'examples'}")  # the vault taskset, for the orchestrator
    train, samples = three_steps(tmp_path / "run", *LOOKUP_AND_VAULT)
    assert all(r["env/tool_calls"] > 0.5 and r["env/turns"] > 1 for r in train), train
    assert [r["env/vault/errors"] + r["env/vault/timeouts"] for r in train if "env/vault/turns" in r] == [0.0] * 3
    assert all(r["env/vault/tool_calls"] > 0.5 for r in train), train
    assert 0 <= train[0]["eval/teacher_reward"] <= 1  # the teacher played the eval episodes of its sources too
    tokenizer = student_tokenizer(compose_config(LOOKUP))
    called = dict.fromkeys(PLAYERS, 0)
    for s in samples:
        assert s["mode"] == PLAYERS[s["source"]], s
        assert s["prompt"].startswith("<|im_start|>system\ntools: get(key)<|im_end|>")
        mask = s["loss_mask"] or [True] * len(s["completion_ids"])  # null: one reply, all of it trained
        turns = [(trained, tokenizer.decode(ids)) for trained, ids in segments(s["completion_ids"], mask)]
        assert [trained for trained, _ in turns] == [i % 2 == 0 for i in range(len(turns))]  # reply, tool turn, …
        for (_, reply), (_, between) in zip(turns[::2], turns[1::2]):  # a reply, then (it ends it) a tool turn
            result = TOOL_TURN.fullmatch(between).group(2)
            call = CALLED_KEY.search(reply)
            if call:  # get(key) ran on the call's own key: the value, or the tool's answer to a wrong key
                assert result == f"no key {call.group(1)}" or result.isalpha(), (reply, result)
                called[s["source"]] += 1
                if s["source"] == "vault":  # the call counted in the trace's state: a fifth of the reward
                    assert s["reward"] >= 0.2, s
    assert all(called.values()), called


TOOL_TURN = re.compile(r"(<\|im_end\|>)?\n<\|im_start\|>tool\n(.*)<\|im_end\|>\n<\|im_start\|>assistant\n", re.S)
CALLED_KEY = re.compile(r'<tool_call>\{"name": "get", "arguments": \{"key": "([a-z]+)"\}\}</tool_call>')
