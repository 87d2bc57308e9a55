"""Rewards from a model (prime_rl/judge, docs/how-to/judge.md): a chat judge served by the launcher beside the
student, scoring one source of a mix while the code verifier scores the other; a reward model (a sequence
classifier) behind a hosted endpoint, asked through vLLM's pooling API. Each reward is checked against the judge's
own weights run by transformers. The refusals are in the invalid-input catalogue (tests/test_invalid_inputs.py)."""

import asyncio
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from prime_rl.config import ConfigError, compose_config
from prime_rl.config.rules import check_rules
from prime_rl.config.schema import (
    Config,
    JudgeConfig,
    TaskConfig,
    TeacherConfig,
    TeacherKind,
    TinyModelConfig,
    Verdict,
    WarmStartConfig,
)
from prime_rl.config.teachers import DEFAULT
from prime_rl.judge.judge import Judge, Judged, JudgeFailed
from prime_rl.judge.verdict import rubric_prompt, yes_no_reward
from prime_rl.models import student_dir, teacher_dir
from prime_rl.models.chat import final_answer
from prime_rl.orchestrator.context import make_teacher
from prime_rl.prepare import prepare_model, prepare_student
from prime_rl.tasks.builtin import TINY_JUDGE_RUBRIC
from prime_rl.tasks.rewards import exact
from prime_rl.teacher.answers import TeacherAnswers
from prime_rl.teacher.chat_api import VLLM_API
from tests.conftest import unused_port
from tests.http_stub import StubHandler, serve_stub, stub_url
from tests.test_e2e_rl import launch, rows
from tests.vllm_server import serve

STUDENT = "model.warm_start.task=reverse"  # the built-in reverse student (one build for a mix of reverse sources)
TINY_JUDGE = "++teachers={judge:{kind:local_vllm,model:tiny,warm_start:{task:judge,steps:60}}}"
# opd's teacher, a tiny judge, judges the rl source and scores the opd source's tokens: one server does both
OPD_TEACHER_JUDGES = [
    "training_mode=opd",
    "teacher=local_vllm",
    "teacher.warm_start.task=judge",
    "teacher.warm_start.steps=60",
    "trainer.loss.teacher_tau=0.1",
    "task=mix",
    "task.mix=[{name:reverse,label:code,verifier:exact},{name:reverse,label:judged,verifier:judge,seed:1,mode:rl},"
    "{name:gym,env:prime_rl.tasks.lookup_env:Lookup,max_turns:3,label:episodes,verifier:judge,mode:rl}]",
    # a student that calls lookup's tool (tests/test_episodes.py's build): its episodes are judged whole
    "model.warm_start.task=lookup",
    "model.warm_start.steps=120",
    "orchestrator.sampling.max_tokens=64",
]


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        # a built-in judge that teaches nothing has nothing to learn unless told what to judge
        (
            ["task.verifier=judge", "++teachers={j:{kind:local_vllm,model:tiny}}", "judge.teacher=j"],
            ["teachers.j.warm_start.task"],
        ),
        # a classifier cannot also score the opd student's tokens
        (
            ["training_mode=opd", "teacher=local_vllm", "task.verifier=judge", "judge.verdict=reward_model"],
            ["judge.verdict", "judge.teacher"],
        ),
        # an eval task is judged by the run's judge: there must be one
        (
            ["orchestrator.eval.tasks=[{name:sort,verifier:judge}]"],
            ["orchestrator.eval.tasks[0].verifier", "task.verifier"],
        ),
        (
            ["task.verifier=judge", TINY_JUDGE, "judge.teacher=judge", "orchestrator.verification.enabled=false"],
            ["orchestrator.verification.enabled", "task.verifier"],
        ),
    ],
)
def test_a_judge_that_cannot_serve_its_sources_is_refused(overrides, keys):
    with pytest.raises(ConfigError) as err:
        check_rules(compose_config(overrides), 0)
    assert err.value.keys == keys


def test_a_verdict_an_unreadable_answer_and_a_failed_request_are_each_counted():
    """A judge on a real HTTP endpoint that scores one reply, answers another with no number and fails the third
    every time: the rewards are 0.7, none, none; the failure was retried within teacher.max_retries; the step's
    metrics count each kind."""
    requests = []

    class Endpoint(StubHandler):
        def do_POST(self):
            reply = json.loads(self.body())["messages"][0]["content"]
            requests.append(reply)
            if reply == "down":
                return self.reply(500, b'{"error": "down"}')
            content = "Score: 7/10" if reply == "good" else "hard to say"
            choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            self.reply(
                200, json.dumps({"choices": [choice], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}).encode()
            )

    server = serve_stub(Endpoint)
    teacher_cfg = TeacherConfig(
        kind=TeacherKind.external, model="judge", base_url=f"{stub_url(server)}/v1", max_retries=1
    )
    cfg = replace(Config(), teacher=teacher_cfg)

    async def judged() -> tuple[list, dict]:
        teacher = make_teacher(cfg, DEFAULT)
        teacher.answers = TeacherAnswers(cfg, teacher.client, teacher.model, VLLM_API)
        judge = Judge(JudgeConfig(verdict=Verdict.score, rubric="{completion}"), teacher)
        try:
            rewards = await judge.rewards([Judged("p", reply, None) for reply in ("good", "vague", "down")])
            metrics = judge.take_metrics() | teacher.answers.step_metrics()
            first = sorted(requests)
            with pytest.raises(JudgeFailed):  # a batch the judge answers nothing of stops the run
                await judge.rewards([Judged("p", "down", None)] * 2)
            return rewards, metrics | {"first": first}
        finally:
            await teacher.client.close()

    try:
        rewards, metrics = asyncio.run(judged())
    finally:
        server.shutdown()
    assert rewards == [pytest.approx(0.7), None, None]
    assert metrics["first"] == ["down", "down", "good", "vague"]  # the failing one asked 1 + max_retries times
    assert len(requests) == 4 + 2 * 2
    assert {k: metrics[k] for k in ("judge/calls", "judge/unparsed", "judge/failed")} == {
        "judge/calls": 3,
        "judge/unparsed": 1,
        "judge/failed": 1,
    }
    assert metrics["teacher/requests"] == 4 and metrics["teacher/prompt_tokens"] == 10 and metrics["time/judge"] > 0


@pytest.mark.integration
def test_a_student_warm_started_on_a_judged_task_records_its_greedy_reward_by_code(tmp_path):
    """A tiny model's build measures its greedy eval reward without any server: a judged source's by the default
    verifier (the judge's server is not up yet; it was a crash of every fresh task.verifier=judge run)."""
    task = TaskConfig(verifier="judge", num_train=64, num_eval=8)
    built = prepare_model("tiny", TinyModelConfig(), WarmStartConfig(steps=2), task, str(tmp_path))
    assert 0 <= json.loads((built / "recipe.json").read_text())["eval_greedy_reward"] <= 1


@pytest.mark.faults
def test_an_unreachable_hosted_reward_model_stops_the_job_in_one_line_before_any_server(tmp_path):
    """A reward model takes no chat, so it is not probed as a chat teacher is; it must list its models instead."""
    url = f"http://127.0.0.1:{unused_port()}/v1"
    run_dir = tmp_path / "run"
    run = launch(
        run_dir,
        STUDENT,
        "task.verifier=judge",
        f"++teachers={{rm:{{kind:external,model:rm,base_url:'{url}'}}}}",
        "judge.teacher=rm",
        "judge.verdict=reward_model",
        "monitor=off",
    )
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert url in line and "teachers.rm.base_url" in line
    assert not (run_dir / "logs").exists()  # no server, no process of the run started


def samples_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


@pytest.mark.vllm
def test_the_opd_teacher_judges_replies_and_episodes_of_a_mix_as_its_weights_say_and_the_code_verifier_the_rest(
    tmp_path,
):
    """A mix of an opd reverse source scored by `exact`, an rl reverse source and an rl source of multi-turn lookup
    episodes, both judged by opd's own teacher (one local server scores the opd tokens and judges: a tiny model
    warm-started to say yes or no to a reply against the answer). Each judged reward is P(yes) / (P(yes) + P(no)) of
    the judge's first token as transformers computes it on the filled-in rubric, an episode's on its whole
    transcript (the environment's reward replaced); a reply whose top 20 holds neither would train nothing and be
    counted; one verdict per sample, asked concurrently with the code verifier's. The run is in turns (the colocated
    layout, a CPU's default)."""
    overrides = [*OPD_TEACHER_JUDGES, f"judge.rubric='{TINY_JUDGE_RUBRIC}'"]
    run_dir = tmp_path / "run"
    common = ["max_steps=2", "orchestrator.eval.interval=0", "orchestrator.log_samples=1000", "monitor=off"]
    run = launch(run_dir, *overrides, *common)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in (run_dir / "logs").glob("teacher_inference*")) == ["teacher_inference.log"]
    assert json.loads((run_dir / "configs" / "plan.json").read_text())["layout"] == "colocated"

    cfg = compose_config(overrides)
    judge_dir = teacher_dir(cfg)
    judge, judge_tok = AutoModelForCausalLM.from_pretrained(judge_dir), AutoTokenizer.from_pretrained(judge_dir)
    student_tok = AutoTokenizer.from_pretrained(student_dir(cfg))
    samples, train = samples_of(run_dir), [r for r in rows(run_dir) if "loss" in r]
    judged_rewards = []
    for r in train:
        mine = [s for s in samples if s["step"] == r["step"]]
        judged = [s for s in mine if s["source"] != "code"]
        assert r["judge/calls"] == len(judged) > 0 and r["judge/failed"] == 0
        assert r["judge/unparsed"] == sum(s["failed"] for s in judged)
        for s in mine:
            word = s["prompt"].split("reverse: ")[1].split("<")[0] if s["source"] != "episodes" else ""
            reply = final_answer(student_tok.decode(s["completion_ids"], skip_special_tokens=True))
            if s["source"] == "code":
                assert s["reward"] == exact(reply, word[::-1]) and not s["failed"] and s["mode"] == "opd"
                assert len(s["teacher_logprobs"]) == len(s["completion_ids"])  # the same server scored its tokens
                continue
            answer = word[::-1] or None  # an episode has no reference answer
            question = [{"role": "user", "content": rubric_prompt(TINY_JUDGE_RUBRIC, "", reply, answer)}]
            ids = torch.tensor([judge_tok.apply_chat_template(question, add_generation_prompt=True, return_dict=False)])
            with torch.no_grad():
                logprobs = judge(ids).logits[0, -1].float().log_softmax(-1)
            top = logprobs.topk(20)
            want = yes_no_reward(
                {judge_tok.decode([i]): lp for i, lp in zip(top.indices.tolist(), top.values.tolist())}
            )
            if want is None:
                assert s["failed"] and s["reward"] == 0 and not any(s["loss_mask"]), s
            else:
                assert s["reward"] == pytest.approx(want, abs=2e-3) and not s["failed"], (reply, s["reward"], want)
                judged_rewards.append(s["reward"])
        played = [s["reward"] for s in judged if not s["failed"] and s["source"] == "judged"]
        if played:
            assert r["reward/judged"] == pytest.approx(sum(played) / len(played))
        assert r["teacher/requests"] >= len(judged) and r["time/judge"] > 0
    assert judged_rewards and len(set(judged_rewards)) > 1  # verdicts, each its reply's, not one constant
    # a group of verdicts within float noise of each other (std <= orchestrator.tie_std) is tied: no advantage
    groups = {}
    for s in samples:
        if s["source"] == "judged" and not s["failed"]:
            groups.setdefault((s["step"], s["prompt"]), []).append((s["reward"], s["advantage"]))
    for group in groups.values():
        rewards, advantages = zip(*group)
        tied = statistics.pstdev(rewards) <= cfg.orchestrator.tie_std
        assert all(a == 0 for a in advantages) if tied else any(a != 0 for a in advantages), group
    episodes = [s for s in samples if s["source"] == "episodes"]
    assert any(r.get("env/episodes/turns", 0) > 1 for r in train) and episodes
    assert any(s["loss_mask"] and not all(s["loss_mask"]) for s in episodes)  # a tool's turn inside: multi-turn


def reward_model_from(lm_dir: Path, out: Path) -> Path:
    """A sequence classifier of one label on the student's body: the tiny LM's weights, a seeded new score head."""
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(lm_dir, num_labels=1)
    model.config.pad_token_id = (
        model.config.eos_token_id[0] if isinstance(model.config.eos_token_id, list) else model.config.eos_token_id
    )
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(lm_dir).save_pretrained(out, save_jinja_files=False)
    return out


@pytest.mark.vllm
def test_a_hosted_reward_model_scores_each_reply_through_vllms_classify_api(tmp_path):
    """A reward model served elsewhere (a vLLM server of a Qwen2ForSequenceClassification, reached as an external
    endpoint): each reply's reward is sigmoid(logit) of the conversation (the prompt, the reply) as transformers
    scores it, and the launcher never probes it for chat."""
    cfg = compose_config([STUDENT])
    rm_dir = reward_model_from(prepare_student(cfg), tmp_path / "rm")
    with serve(rm_dir, tmp_path, served_name="rm", student=False) as url:
        run_dir = tmp_path / "run"
        run = launch(
            run_dir,
            STUDENT,
            "task.verifier=judge",
            f"++teachers={{rm:{{kind:external,model:rm,base_url:'{url}/v1'}}}}",
            "judge.teacher=rm",
            "judge.verdict=reward_model",
            "max_steps=1",
            "orchestrator.eval.interval=0",
            "orchestrator.log_samples=1000",
            "monitor=off",
        )
    assert run.returncode == 0, run.stderr[-3000:]
    model, tok = AutoModelForSequenceClassification.from_pretrained(rm_dir), AutoTokenizer.from_pretrained(rm_dir)
    student_tok = AutoTokenizer.from_pretrained(student_dir(cfg))
    samples = samples_of(run_dir)
    [r] = [r for r in rows(run_dir) if "loss" in r]
    assert r["judge/calls"] == len(samples) == 128 and r["judge/unparsed"] == r["judge/failed"] == 0
    for s in samples[:32]:
        prompt = s["prompt"].split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
        reply = final_answer(student_tok.decode(s["completion_ids"], skip_special_tokens=True))
        conversation = [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
        ids = torch.tensor([tok.apply_chat_template(conversation, return_dict=False)])
        with torch.no_grad():
            logit = model(ids).logits[0, 0].item()
        assert s["reward"] == pytest.approx(1 / (1 + math.exp(-logit)), abs=2e-3), (reply, s["reward"], logit)
    assert len({s["reward"] for s in samples}) > 1
