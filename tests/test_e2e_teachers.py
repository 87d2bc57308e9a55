"""opd and sft for real: a student and a teacher vLLM server (or an external endpoint), orchestrator, trainer."""

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from prime_rl.config import compose_config
from prime_rl.config.schema import Config
from prime_rl.config.teachers import teacher_view
from prime_rl.models.chat import prompt_ids
from prime_rl.prepare import prepare_teacher
from tests.hosted_api import HostedApi, Rules
from tests.http_stub import StubHandler, serve_stub, stub_url
from tests.test_e2e_rl import eval_gain_in_standard_errors, launch, rows, summary
from tests.test_episodes import ON_POLICY
from tests.test_inference_vllm import hf_scores

KEY_ENV = "PRIME_RL_TEST_TEACHER_KEY"
QWEN3_TEACHER = "teacher.warm_start.steps=40"
BOTH_ADVANTAGES = "trainer.loss.adv_tau=1.0 orchestrator.batch_size=32 orchestrator.rollouts_per_example=4"
WHOLE_VOCAB_TOP_K = "trainer.loss.distill=topk trainer.loss.distill_top_k=300"  # tiny_qwen3's vocabulary


@pytest.fixture(scope="module")
def teacher_dir() -> Path:
    return prepare_teacher(compose_config(["training_mode=opd"]))


@pytest.mark.vllm
def test_opd_distills_the_teacher(tmp_path, teacher_dir, standing_servers):
    """The reference experiment (experiment=opd) learns toward the teacher, with every step's teacher term; in 20
    steps (its cosine decay then ends at 20) it measured 0.43 -> 0.77 (14 standard errors), the teacher term's last
    5 steps 0.48 of its first 5 (docs/opd_sweep.md tuned it at 40-80 steps)."""
    run = launch(
        tmp_path / "run", "experiment=opd", "max_steps=20", "orchestrator.eval.interval=20", standing=standing_servers
    )
    assert run.returncode == 0, run.stderr[-3000:]
    s = summary(tmp_path / "run")
    train = [r for r in rows(tmp_path / "run") if "loss" in r]
    kl = [r["teacher_kl"] for r in train]
    assert [r["step"] for r in train] == list(range(20)) and len(kl) == 20, kl
    # the teacher term falls (rollouts are sampled unseeded: five steps a side, so one step's noise cannot decide)
    assert sum(kl[-5:]) <= 0.6 * sum(kl[:5]), kl
    assert s["eval/teacher_reward"] > s["eval/reward_first"]
    assert eval_gain_in_standard_errors(tmp_path / "run") > 4, s  # toward the teacher
    assert not (tmp_path / "run" / "merged").exists()  # full fine-tuning: no merged adapter


def test_a_cut_off_teacher_answer_gets_no_end_of_turn_token(teacher_dir):
    from types import SimpleNamespace

    from prime_rl.inference.client import ChatAnswer
    from prime_rl.models.chat import end_of_turn_id
    from prime_rl.orchestrator.algo.sft import teacher_sample
    from prime_rl.tasks import Example

    ctx = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(teacher_dir), cfg=Config())
    teacher = SimpleNamespace(cfg=Config(), label="teacher")
    example = Example("reverse: abc", "cba")
    sample = teacher_sample(ctx, teacher, example, ChatAnswer("cba", "stop"))
    assert (sample.mode, sample.teacher, sample.loss_mask) == ("rl", "teacher", None)  # Config() is rl
    finished = sample.completion_ids
    cut = teacher_sample(ctx, teacher, example, ChatAnswer("cb", "length")).completion_ids
    eot = end_of_turn_id(ctx.tokenizer)
    assert finished[-1] == eot and eot not in cut and ctx.tokenizer.decode(cut) == "cb"


@pytest.mark.vllm
def test_sft_from_the_local_teacher_learns(tmp_path, teacher_dir, standing_servers):
    """The reference experiment (experiment=sft) learns from the teacher's rollouts, with no teacher term."""
    run = launch(
        tmp_path / "run", "experiment=sft", "max_steps=20", "orchestrator.eval.interval=20", standing=standing_servers
    )
    assert run.returncode == 0, run.stderr[-3000:]
    s = summary(tmp_path / "run")
    # 20 steps gained 0.195-0.30 (7-11 standard errors) in measured runs; a fixed +0.2 margin failed on the 0.195
    assert eval_gain_in_standard_errors(tmp_path / "run") > 4, s
    assert s["reward/mean/first"] > 0.9  # the teacher's rollouts are scored too: they are near perfect
    train = [r for r in rows(tmp_path / "run") if "loss" in r]
    assert [r["step"] for r in train] == list(range(20)) and not any("teacher_kl" in r for r in train)
    assert not (tmp_path / "run" / "merged").exists()


# the built-in task under three labels, each source with its own mode (the first: training_mode's, rl); the opd one
# as pure distillation (its own adv_tau 0, one sample per prompt) scored by a named local teacher of its own, built
# on that source alone
# (40 warm-start steps: routing is what is tested), the sft one answered by a named external teacher: a hosted API
# (tests/hosted_api.py) that wants its key and answers "OK."
MIXED_MODES = (
    "task.mix=[{name:reverse,label:rl_part},"
    "{name:reverse,label:opd_part,mode:opd,adv_tau:0,teacher:scorer,rollouts_per_example:1},"
    "{name:reverse,label:sft_part,mode:sft,teacher:api},"
    "{name:reverse,label:opsd_part,mode:opsd,teacher_tau:0.5}]"
)
API_KEY_ENV, API_KEY = "PRIME_RL_TEST_NAMED_TEACHER_KEY", "sk-named-teacher-test"
HINT = "Hint: {answer}"  # a teacher's system prompt (teacher.system_prompt)


def hinted(prompt: str) -> str:
    """The system prompt HINT of a reverse prompt."""
    return HINT.format(answer=prompt.removeprefix("reverse: ")[::-1])


@pytest.mark.vllm
def test_a_mix_trains_each_source_with_its_own_mode_and_teacher_in_the_same_steps(tmp_path, monkeypatch):
    """task.mix[i].mode and .teacher: every step holds rl, opd, sft and opsd samples, each with its source's mode; the
    student samples the rl, opd and opsd prompts, the named local teacher (a vLLM server of its own) scores the opd
    ones, the student's own server (its adapter) the opsd ones, the named external one writes the sft ones with its
    key; the trainer takes the policy loss on the student's
    samples at their sampling temperature (on policy at 0.8: mismatch_kl ~0, which the sft samples, with no sampler
    logprobs, would ruin) and the NLL on the teacher's. With LoRA and the reference KL (the adapter off) on every
    mode's samples: the LoRA reference experiment of rl. Each teacher has a system prompt of its own that shows it
    the answer (teacher.system_prompt): it is in every request to it, and in no prompt of the student's."""
    api = HostedApi(Rules(key=API_KEY))
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    teachers = (
        f"++teachers={{scorer:{{kind:local_vllm,model:tiny,warm_start:{{steps:40}},system_prompt:'{HINT}'}},"
        f"api:{{kind:external,model:hosted,base_url:'{api.url}',api_key_env:{API_KEY_ENV},system_prompt:'{HINT}'}}}}"
    )
    run_dir = tmp_path / "run"
    try:
        run = launch(
            run_dir,
            "task=mix",
            MIXED_MODES,
            teachers,
            "trainer.loss.teacher_tau=1.0",
            "model.warm_start.task=reverse",  # the built-in reverse student: no build for the mix
            "orchestrator.sampling.temperature=0.8",
            "debug=smoke",
            "seed=3",  # the prompts' draw is seeded: with this seed each step draws every source of the four
            "orchestrator.log_samples=128",  # the whole step: 16 prompts x 8 at most
            "lora=on",
            "trainer.loss.kl_ref_tau=0.1",  # the reference: the adapter off, at each mode's temperature
            *ON_POLICY,
        )
    finally:
        api.close()
    assert run.returncode == 0, run.stderr[-3000:]
    train = [r for r in rows(run_dir) if "loss" in r]
    assert [r["step"] for r in train] == [0, 1, 2]
    for r in train:
        assert r["teacher_kl"] != 0 and "teacher/truncated" in r and "seq_len/truncated" in r, r
        assert r["teacher/api/completion_tokens"] > 0 and "teacher/completion_tokens" not in r, r
        assert all(f"reward/{mode}_part" in r for mode in ("rl", "opd", "sft", "opsd")), r
        assert r["time/self_score"] > 0 and r["self_score/too_long"] == 0, r
        # the correction's metrics per source, over each source's student samples (sft's are the teacher's: none)
        per_source = [r[f"mismatch_kl/{mode}_part"] for mode in ("rl", "opd", "opsd")]
        assert max(per_source) < 1e-6 and "mismatch_kl/sft_part" not in r and "masked_fraction/rl_part" in r, r
    assert max(abs(r["mismatch_kl"]) for r in train) < 1e-6, [r["mismatch_kl"] for r in train]
    # step 0 trains the starting weights: KL 0 to the reference
    assert train[0]["kl_ref"] == 0.0 and all(r["kl_ref"] >= 0 for r in train), train
    assert (run_dir / "merged" / "config.json").exists()
    assert (run_dir / "weights" / "step_3" / "adapter_model.safetensors").exists()
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    per_prompt = Counter((s["step"], s["source"], s["prompt"]) for s in samples)  # 16 prompts a step, all logged
    assert len(per_prompt) == 3 * 16
    assert {(source, n) for (_, source, _), n in per_prompt.items()} == {
        ("rl_part", 8),
        ("opd_part", 1),
        ("sft_part", 8),
        ("opsd_part", 8),
    }
    assert {(s["source"], s["mode"], s["teacher"]) for s in samples} == {
        ("rl_part", "rl", None),
        ("opd_part", "opd", "teachers.scorer"),
        ("sft_part", "sft", "teachers.api"),
        ("opsd_part", "opsd", "self"),  # scored by the student's own server (its LoRA adapter)
    }
    assert all(s["completion"].startswith("OK.") for s in samples if s["source"] == "sft_part")
    first = next(r for r in rows(run_dir) if "eval/teacher_reward" in r)
    assert all(0 <= first[f"eval/{mode}_part/teacher_reward"] <= 1 for mode in ("opd", "sft")), first
    assert "eval/rl_part/teacher_reward" not in first  # no teacher teaches it
    # each teacher got its own source's requests: scoring (prompt logprobs) at the local one, the sft answers (and
    # the evaluation of the sft source) at the hosted one, one request per prompt of the source
    scorer = (run_dir / "logs" / "teacher_inference_scorer.log").read_text()
    assert "POST /v1/completions" in scorer, scorer[-2000:]
    asked = [body["messages"] for body, status, _ in api.run_requests() if status == 200]
    sft_prompts = {re.search(r"reverse: [a-z]+", s["prompt"]).group() for s in samples if s["source"] == "sft_part"}
    assert sft_prompts and sft_prompts <= {m[-1]["content"] for m in asked}, len(asked)
    # the hosted teacher is shown each prompt's answer, the student never
    assert all(m[0] == {"role": "system", "content": hinted(m[-1]["content"])} for m in asked), asked[:2]
    assert not any("Hint" in s["prompt"] for s in samples)
    # the local one scored the student's tokens after the same prompt shown the answer, as transformers does
    cfg = compose_config(["task=mix", MIXED_MODES, teachers, "trainer.loss.teacher_tau=1.0"])
    scorer_dir = prepare_teacher(teacher_view(cfg, "scorer"))
    scorer_tokenizer = AutoTokenizer.from_pretrained(scorer_dir)  # the student's: the same built-in characters
    opd = [s for s in samples if s["source"] == "opd_part"]
    users = [re.search(r"reverse: [a-z]+", s["prompt"]).group() for s in opd]
    chats = [[{"role": "system", "content": hinted(u)}, {"role": "user", "content": u}] for u in users]
    shown = [prompt_ids(scorer_tokenizer, chat) for chat in chats]
    scorer_model = AutoModelForCausalLM.from_pretrained(scorer_dir)
    expected = hf_scores(scorer_model, shown, [s["completion_ids"] for s in opd])
    for s, want, p in zip(opd, expected, shown):
        assert s["teacher_logprobs"] == pytest.approx(want[len(p) - 1 :], abs=1e-3), s["prompt"]
    unshown = hf_scores(scorer_model, [s["prompt_ids"] for s in opd], [s["completion_ids"] for s in opd])
    assert any(
        s["teacher_logprobs"] != pytest.approx(u[len(s["prompt_ids"]) - 1 :], abs=1e-3) for s, u in zip(opd, unshown)
    )
    assert not [p for p in run_dir.rglob("*") if p.is_file() and API_KEY.encode() in p.read_bytes()]


@pytest.mark.integration
def test_opd_that_wants_the_students_tokens_from_another_tokenizer_fails_before_anything_starts(tmp_path, teacher_dir):
    """teacher.alignment=tokens: the teacher must score the student's own tokens (auto would align on text)."""
    other = tmp_path / "other-teacher"
    shutil.copytree(teacher_dir, other)
    config = json.loads((other / "tokenizer.json").read_text())
    config["added_tokens"].append(
        {
            "id": 300,
            "content": "<|other|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    (other / "tokenizer.json").write_text(json.dumps(config))
    run = launch(
        tmp_path / "run", "training_mode=opd", f"teacher.model={other}", "teacher.alignment=tokens", "max_steps=3"
    )
    assert_refused_before_start(run, tmp_path / "run", names=[str(other), "teacher.alignment"])


def assert_refused_before_start(run, run_dir: Path, names: list[str]) -> None:
    """The job ended with one error line that names each of `names` and the fix (after the lines naming the models
    it prepared), before it started any process."""
    assert run.returncode == 2, run.stderr[-3000:]
    [line] = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert all(name in line for name in names) and "; fix: " in line, line
    assert run.stderr.strip().endswith(line), run.stderr
    assert not (run_dir / "logs").exists() and not (run_dir / "metrics.jsonl").exists()


class NoPromptLogprobsTeacher:
    """A stand-in OpenAI-compatible endpoint that tokenizes like the student but never returns prompt logprobs."""

    def __init__(self, tokenizer):
        class Handler(StubHandler):
            def do_POST(self):
                body = json.loads(self.body())
                if self.path == "/tokenize":
                    answer = {"tokens": tokenizer.encode(body["prompt"], add_special_tokens=False)}
                elif self.path.endswith("/chat/completions"):  # the launcher's probe of the chat endpoint
                    message = {"role": "assistant", "content": "x"}
                    answer = {"choices": [{"index": 0, "message": message, "finish_reason": "length"}]}
                else:
                    answer = {"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]}
                self.reply(200, json.dumps(answer).encode())

        self.server = serve_stub(Handler)
        self.url = stub_url(self.server) + "/v1"


@pytest.mark.integration
def test_opd_against_an_endpoint_without_prompt_logprobs_fails_before_anything_starts(tmp_path, monkeypatch):
    from prime_rl.prepare import prepare_student

    monkeypatch.setenv(KEY_ENV, "unused")
    teacher = NoPromptLogprobsTeacher(AutoTokenizer.from_pretrained(prepare_student(Config())))
    try:
        run = launch(
            tmp_path / "run",
            "training_mode=opd",
            "teacher=external",
            f"teacher.base_url={teacher.url}",
            "teacher.model=x",
            f"teacher.api_key_env={KEY_ENV}",
            "teacher.max_retries=0",
            "max_steps=3",
        )
    finally:
        teacher.server.shutdown()
    assert_refused_before_start(run, tmp_path / "run", names=[teacher.url])


# opd and sft with LoRA on the realistic family (Qwen3, tied embeddings, BPE, a system turn) in one run, a source
# each, both taught by one local teacher of 40 warm-start steps (its quality is not what this tests): opd with the
# reward advantage too (adv_tau * A + teacher_tau x the KL over the teacher's top k, here the whole 300-token
# vocabulary: the exact KL; real groups of 4), sft from the teacher's answers cut at 2 tokens, shorter than every
# answer. rl with LoRA: the mixed-mode run above; the full-weight reference experiments run in the learning tests
# (rl: tests/test_e2e_rl.py, opd and sft above), rl on the realistic family in test_rl_on_the_tied_qwen3_family.
OPD_AND_SFT = "task.mix=[{name:reverse,label:opd_part},{name:reverse,label:sft_part,mode:sft}]"
BUILT_ON_REVERSE = ["model.warm_start.task=reverse", "teacher.warm_start.task=reverse"]  # the other runs' builds


@pytest.mark.vllm
def test_the_lora_reference_experiments_run_end_to_end_on_the_qwen3_family(tmp_path):
    overrides = ["experiment=opd_lora", "model=tiny_qwen3", QWEN3_TEACHER, *BOTH_ADVANTAGES.split()]
    overrides += [*WHOLE_VOCAB_TOP_K.split(), "task=mix", OPD_AND_SFT, *BUILT_ON_REVERSE, "teacher.max_tokens=2"]
    overrides += ["debug=smoke", "orchestrator.log_samples=32"]
    run = launch(tmp_path / "run", *overrides)
    assert run.returncode == 0, run.stderr[-3000:]
    train = [r for r in rows(tmp_path / "run") if "loss" in r]
    assert [r["step"] for r in train] == [0, 1, 2]
    assert all("teacher_kl" in r and r["batch/file_mib"] > 0 for r in train)
    assert all("reward/opd_part" in r and r["verifier/calls"] > 0 for r in train)  # adv_tau=1: rewards too
    # the teacher's whole distribution arrived (no mass outside its "top k"), and the KL over it trained
    assert all(0 < r["distill/topk_kl"] and r["distill/teacher_tail"] < 1e-4 for r in train), train
    # teacher answers cut off by teacher.max_tokens come back with finish_reason "length": counted, and trained
    # without the end-of-turn token (test_a_cut_off_teacher_answer_gets_no_end_of_turn_token)
    assert all(r["teacher/truncated"] > 0.5 for r in train), train
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert {(s["source"], s["mode"]) for s in samples} == {("opd_part", "opd"), ("sft_part", "sft")}
    assert (tmp_path / "run" / "merged" / "config.json").exists()
    assert (tmp_path / "run" / "weights" / "step_3" / "adapter_model.safetensors").exists()
