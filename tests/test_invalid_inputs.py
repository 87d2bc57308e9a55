"""The catalogue of invalid inputs: each exits 2 with one line naming what is wrong and how to fix it,
before anything is spawned, leaving the run dir as it was. docs/invalid_inputs.md is generated from these
cases (`python -m tests.test_invalid_inputs`), and a test keeps it in step with what the launcher says."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.forked_launch import run_launch

pytestmark = pytest.mark.faults  # with tests/test_faults.py: `pytest -m faults`
DOC = ROOT / "docs" / "invalid_inputs.md"
UNSET_KEY_ENV = "PRIME_RL_TEST_UNSET_KEY"
EXTERNAL = ("training_mode=sft", "teacher=external")  # conf/teacher/external.yaml: OpenAI, key in OPENAI_API_KEY


# Model dirs some cases name, built by `model_dirs` (each shown as its placeholder in the docs): the default tiny
# student; a tiny teacher on a BPE of the task's text (another tokenizer); one whose tokenizer knows a few words only.
STUDENT, BPE_TEACHER, WORDS_TEACHER = (
    "<student dir>",
    "<dir of a teacher of another tokenizer>",
    "<dir of a teacher of words>",
)
JUDGE = f"++teachers={{j:{{kind:local_vllm,model:'{STUDENT}'}}}}"  # a judge's server: the student's dir


@dataclass(frozen=True)
class Case:
    kind: str  # the row's category in the docs table
    what: str  # the mistake, in words
    args: tuple[str, ...]  # the command line after `python launch.py`
    names: str  # what the one-line error must name (a key, a group, a path)


CASES = [
    Case("wrong type", "text for an integer", ("max_steps=abc",), "[max_steps]"),
    Case("wrong type", "text for a float", ("trainer.optim.lr=fast",), "[trainer.optim.lr]"),
    Case("wrong type", "fraction for an integer", ("orchestrator.batch_size=1.5",), "[orchestrator.batch_size]"),
    Case("wrong type", "not a boolean", ("orchestrator.std_normalize=maybe",), "[orchestrator.std_normalize]"),
    Case("wrong type", "not one of an enum's values", ("monitor.wandb.mode=sometimes",), "[monitor.wandb.mode]"),
    Case(
        "wrong type",
        "no such tiny architecture",
        ("model.tiny.architecture=llama",),
        "[model.tiny.architecture]",
    ),
    Case("unknown key", "misspelt key", ("trainer.loss.teacher_ta=1",), "[trainer.loss.teacher_ta]"),
    Case("unknown key", "key added with +", ("+trainer.foo=1",), "[trainer.foo]"),
    Case("unknown key", "top-level key added with +", ("+max_step=10",), "[max_step]"),
    Case("unknown choice", "no such training mode", ("training_mode=ppo",), "[training_mode]"),
    Case(
        "unknown choice",
        "a mode of one's own by import path on the command line",
        ("training_mode=examples.reward_weighted_sft:MODE",),
        "[training_mode]",
    ),
    Case("unknown choice", "no such teacher", ("teacher=openai",), "[teacher]"),
    Case("unknown choice", "no such task", ("task=addition",), "[task]"),
    Case("unknown choice", "option the built-in task does not take", ("+task.options.length=5",), "[task.options]"),
    Case("syntax", "malformed override", ("max_steps==3",), "max_steps==3"),
    Case("out of range", "no steps", ("max_steps=0",), "[max_steps]"),
    Case(
        "out of range",
        "batch not a multiple of the group size",
        ("orchestrator.batch_size=100",),
        "[orchestrator.batch_size, orchestrator.rollouts_per_example]",
    ),
    Case(
        "out of range", "empty group", ("orchestrator.rollouts_per_example=0",), "[orchestrator.rollouts_per_example]"
    ),
    Case(
        "out of range", "no rollout requests", ("orchestrator.requests_per_step=0",), "[orchestrator.requests_per_step]"
    ),
    Case("wrong type", "unknown trainer dtype", ("trainer.dtype=float16",), "[trainer.dtype]"),
    Case(
        "out of range",
        "negative temperature",
        ("orchestrator.sampling.temperature=-1",),
        "[orchestrator.sampling.temperature]",
    ),
    Case("out of range", "top_p of 0", ("orchestrator.sampling.top_p=0",), "[orchestrator.sampling.top_p]"),
    Case(
        "mode conflict",
        "greedy rollouts to train on",
        ("orchestrator.sampling.temperature=0",),
        "[orchestrator.sampling.temperature, training_mode]",
    ),
    Case(
        "mode conflict",
        "truncated sampling to train on",
        ("orchestrator.sampling.top_p=0.9",),
        "[orchestrator.sampling.top_p, training_mode]",
    ),
    Case(
        "out of range",
        "completions longer than the context",
        ("orchestrator.sampling.max_tokens=600",),
        "[orchestrator.sampling.max_tokens, inference.max_model_len]",
    ),
    Case("out of range", "negative learning rate", ("trainer.optim.lr=-1e-4",), "[trainer.optim.lr]"),
    Case(
        "out of range",
        "probability band of 1",
        ("trainer.loss.correction.prob_band=1",),
        "[trainer.loss.correction.prob_band]",
    ),
    Case(
        "out of range",
        "weight bounds without 1",
        ("trainer.loss.correction.mask_high=0.9",),
        "[trainer.loss.correction.mask_low, trainer.loss.correction.mask_high]",
    ),
    Case(
        "out of range",
        "truncation below 1",
        ("correction=token_tis", "trainer.loss.correction.truncate_at=0.5"),
        "[trainer.loss.correction.truncate_at]",
    ),
    Case("out of range", "no such port", ("inference.port=70000",), "[inference.port]"),
    Case("out of range", "negative checkpoint interval", ("ckpt.interval=-1",), "[ckpt.interval]"),
    Case("out of range", "no checkpoint kept", ("ckpt.keep=0",), "[ckpt.keep]"),
    Case(
        "out of range",
        "fewer train prompts than a step draws",
        ("task.num_train=8",),
        "[task.num_train, orchestrator.batch_size]",
    ),
    Case("out of range", "LoRA of rank 0", ("lora=on", "trainer.lora.rank=0"), "[trainer.lora.rank]"),
    Case(
        "out of range",
        "LoRA rank above vLLM's largest --max-lora-rank (512)",
        ("lora=on", "trainer.lora.rank=600"),
        "[trainer.lora.rank]",
    ),
    Case(
        "out of range",
        "a negative eval temperature",
        ("orchestrator.eval.temperature=-1",),
        "[orchestrator.eval.temperature]",
    ),
    Case(
        "out of range",
        "tiny heads that do not divide the width",
        ("model.tiny.num_heads=3",),
        "[model.tiny.hidden_size, model.tiny.num_heads, model.tiny.num_kv_heads]",
    ),
    Case("mode conflict", "rl with a teacher", ("teacher=local_vllm",), "[training_mode, teacher]"),
    Case(
        "mode conflict",
        "opsd with a teacher (the student scores itself)",
        ("training_mode=opsd", "teacher=local_vllm"),
        "[training_mode, teacher]",
    ),
    Case(
        "mode conflict",
        "opsd on multi-turn episodes",
        (
            "training_mode=opsd",
            "task=gym",
            "task.env=prime_rl.tasks.retry_env:ReverseRetry",
            "model.warm_start.task=reverse",
        ),
        "[training_mode, task.name]",
    ),
    Case(
        "mode conflict",
        "opsd's context without the answer",
        ("training_mode=opsd", "modes.opsd.context=nothing"),
        "[modes.opsd]",
    ),
    Case("mode conflict", "a mode's knobs in a run without it", ("+modes.opsd.context='{answer}'",), "[modes.opsd]"),
    Case(
        "mode conflict",
        "a lagged self-teacher without LoRA, its weights pushed (no files to load it from)",
        ("training_mode=opsd", "modes.opsd.teacher=lagged", "modes.opsd.lag=2", "inference.weight_transfer=gloo"),
        "[modes.opsd.teacher, inference.weight_transfer]",
    ),
    Case(
        "mode conflict",
        "opd's off-policy share (GKD) without the top-k divergence",
        ("training_mode=opd", "modes.opd.on_policy=0.5"),
        "[modes.opd.on_policy, trainer.loss.distill]",
    ),
    Case(
        "wrong type",
        "a teacher's system prompt with a field other than {answer}",
        ("training_mode=opd", "teacher=local_vllm", "teacher.system_prompt='Hint: {solution}'"),
        "[teacher.system_prompt]",
    ),
    Case(
        "mode conflict",
        "a teacher's system prompt on episodes",
        (
            "training_mode=sft",
            "teacher=local_vllm",
            "task=gym",
            "task.env=prime_rl.tasks.retry_env:ReverseRetry",
            "model.warm_start.task=reverse",
            "teacher.system_prompt='Hint: {answer}'",
        ),
        "[teacher.system_prompt]",
    ),
    Case("unknown key", "a mode's knob misspelt", ("training_mode=opsd", "modes.opsd.contxt=x"), "[modes.opsd.contxt]"),
    Case(
        "unknown choice",
        "a mode of one's own that does not import",
        ("task=mix", "task.mix=[{name:reverse,mode:'my_modes:MINE'}]"),
        "[task.mix[0].mode]",
    ),
    Case(
        "mode conflict",
        "LoRA dropout in rl",
        ("lora=on", "trainer.lora.dropout=0.1"),
        "[trainer.lora.dropout, training_mode]",
    ),
    Case("mode conflict", "opd without a teacher", ("training_mode=opd", "teacher=none"), "[training_mode, teacher]"),
    Case(
        "mode conflict",
        "opd without distillation",
        ("training_mode=opd", "trainer.loss.teacher_tau=0"),
        "[trainer.loss.teacher_tau]",
    ),
    Case(
        "mode conflict",
        "teacher_tau outside opd",
        ("trainer.loss.teacher_tau=0.5",),
        "[trainer.loss.teacher_tau, training_mode]",
    ),
    Case(
        "mode conflict",
        "a mix source in opd without a teacher",
        ("task=mix", "task.mix=[{name:reverse},{name:sort,mode:opd}]", "trainer.loss.teacher_tau=1"),
        "[task.mix[1].mode, teacher]",
    ),
    Case("mode conflict", "a source's mode outside a mix", ("task.mode=opd",), "[task.mode]"),
    Case(
        "mode conflict",
        "a source naming an unknown teacher",
        ("task=mix", "task.mix=[{name:reverse,mode:opd,teacher:nope},{name:sort}]", "trainer.loss.teacher_tau=1"),
        "[task.mix[0].teacher]",
    ),
    Case(
        "mode conflict",
        "a named teacher on a source in rl",
        (
            "task=mix",
            "task.mix=[{name:reverse,teacher:rev},{name:sort}]",
            "++teachers={rev:{kind:local_vllm,model:tiny}}",
        ),
        "[task.mix[0].teacher, task.mix[0].mode]",
    ),
    Case(
        "mode conflict",
        "a teacher_tau on a mix source in rl",
        ("task=mix", "task.mix=[{name:reverse,teacher_tau:1},{name:sort}]"),
        "[task.mix[0].teacher_tau, task.mix[0].mode]",
    ),
    Case(
        "mode conflict",
        "dynamic sampling beside an opd source",
        (
            "task=mix",
            "task.mix=[{name:reverse},{name:sort,mode:opd}]",
            "teacher=local_vllm",
            "trainer.loss.teacher_tau=1",
            "orchestrator.dynamic_sampling.enabled=true",
        ),
        "[orchestrator.dynamic_sampling.enabled, task.mix[1].mode]",
    ),
    Case(
        "mode conflict",
        "a top-k teacher signal outside opd",
        ("trainer.loss.distill=topk",),
        "[trainer.loss.distill, training_mode]",
    ),
    Case(
        "out of range",
        "a top-k of no token",
        ("training_mode=opd", "trainer.loss.distill=topk", "trainer.loss.distill_top_k=0"),
        "[trainer.loss.distill_top_k]",
    ),
    Case(
        "out of range",
        "a top-k larger than the teacher's vocabulary",
        ("training_mode=opd", "trainer.loss.distill=topk", "trainer.loss.distill_top_k=1000"),
        "[trainer.loss.distill_top_k]",
    ),
    Case(
        "mode conflict",
        "a tokenizer named for a local teacher",
        ("training_mode=opd", "teacher.tokenizer=/models/llama"),
        "[teacher.tokenizer, teacher]",
    ),
    Case(
        "tokenizer",
        "a teacher of another tokenizer held to the student's tokens",
        ("training_mode=opd", f"model.name={STUDENT}", f"teacher.model={BPE_TEACHER}", "teacher.alignment=tokens"),
        "[teacher.alignment]",
    ),
    Case(
        "tokenizer",
        "a teacher whose tokenizer cannot read the task's text back",
        ("training_mode=opd", f"model.name={STUDENT}", f"teacher.model={WORDS_TEACHER}"),
        "[teacher.model, task]",
    ),
    Case(
        "mode conflict",
        "GRPO advantage with one rollout per prompt",
        ("training_mode=opd", "orchestrator.rollouts_per_example=1"),
        "[trainer.loss.adv_tau, orchestrator.rollouts_per_example]",
    ),
    Case(
        "mode conflict",
        "opd rewards without a verifier",
        ("training_mode=opd", "orchestrator.verification.enabled=false"),
        "[trainer.loss.adv_tau, orchestrator.verification.enabled]",
    ),
    Case(
        "mode conflict",
        "rl without rewards",
        ("orchestrator.verification.enabled=false",),
        "[orchestrator.verification.enabled, training_mode]",
    ),
    Case(
        "unknown key",
        "the mode set below the top level",
        ("orchestrator.training_mode=opd",),
        "[orchestrator.training_mode]",
    ),
    Case("missing file", "student model dir", ("model.name=/nonexistent/student",), "[model.name]"),
    Case(
        "missing file",
        "teacher model dir",
        ("training_mode=opd", "teacher.model=/nonexistent/teacher"),
        "[teacher.model]",
    ),
    Case("missing file", "unreadable dataset", ("task=jsonl", "task.path=/nonexistent/train.jsonl"), "[task.path]"),
    Case("missing file", "dataset not given", ("task=jsonl",), "[task.path]"),
    Case(
        "missing file",
        "an eval task's dataset not given",
        ("orchestrator.eval.tasks=[{name:jsonl}]",),
        "[orchestrator.eval.tasks[0].path]",
    ),
    Case(
        "out of range",
        "several greedy samples of an eval task's prompt",
        ("orchestrator.eval.tasks=[{name:sort,samples_per_prompt:4,temperature:0}]",),
        "[orchestrator.eval.tasks[0].samples_per_prompt, orchestrator.eval.tasks[0].temperature]",
    ),
    Case(
        "mode conflict",
        "an eval task named as a source of the mix",
        ("task=mix", "orchestrator.eval.tasks=[{name:sort}]"),
        "[orchestrator.eval.tasks[0].label]",
    ),
    Case("missing file", "verifiers taskset not installed", ("task=verifiers", "task.env=my_tasks"), "[task.env]"),
    Case(
        "missing file",
        "gym environment factory not importable",
        ("task=gym", "task.env=my_envs:make_env", "model.warm_start.task=reverse"),
        "[task.env]",
    ),
    Case(
        "unknown choice",
        "option the environment does not take",
        ("task=retry", "+task.options.lives=3"),
        "[task.options]",
    ),
    Case(
        "unknown choice",
        "warm start on a task that is not built in",
        ("task=retry", "model.warm_start.task=retry"),
        "[model.warm_start.task]",
    ),
    Case(
        "mode conflict",
        "a local teacher playing episodes read by two tool parsers",
        (
            "training_mode=sft",
            "task=mix",
            "task.mix=[{name:gym,env:'prime_rl.tasks.lookup_env:Lookup'},"
            "{name:gym,env:'prime_rl.tasks.lookup_env:Lookup',tool_parser:mistral}]",
        ),
        "[task.mix, teacher]",
    ),
    Case(
        "mode conflict",
        "tiny model warm-started on episodes",
        ("task=gym", "task.env=prime_rl.tasks.retry_env:ReverseRetry"),
        "[model.warm_start.task, task.env]",
    ),
    Case(
        "GPUs",
        "more GPUs than visible",
        ("deployment.num_infer_gpus=1", "deployment.num_train_gpus=1"),
        "[deployment.num_infer_gpus, deployment.num_train_gpus]",
    ),
    Case(
        "GPUs",
        "teacher GPUs without a teacher server",
        ("deployment.num_teacher_gpus=1",),
        "[deployment.num_teacher_gpus, teacher]",
    ),
    Case(
        "GPUs",
        "teacher GPUs that do not split evenly between the local teachers",
        (
            "task=mix",
            "task.mix=[{name:reverse,mode:opd},{name:sort,mode:opd,teacher:srt}]",
            "teacher=local_vllm",
            "++teachers={srt:{kind:local_vllm,model:tiny}}",
            "trainer.loss.teacher_tau=1",
            "deployment.num_infer_gpus=1",
            "deployment.num_train_gpus=1",
            "deployment.num_teacher_gpus=3",
        ),
        "[deployment.num_teacher_gpus]",
    ),
    Case(
        "GPUs",
        "colocated layout on two GPUs",
        ("deployment=colocated", "deployment.num_infer_gpus=2", "deployment.num_train_gpus=2"),
        "[deployment.layout, deployment.num_infer_gpus, deployment.num_train_gpus]",
    ),
    Case(
        "GPUs",
        "multi-node deployment outside a SLURM job",
        ("deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"),
        "[deployment.num_infer_nodes, deployment.num_train_nodes]",
    ),
    Case(
        "GPUs",
        "NCCL weight transfer without GPUs",
        ("inference.weight_transfer=nccl",),
        "[inference.weight_transfer, deployment.num_infer_gpus, deployment.num_train_gpus]",
    ),
    Case(
        "endpoint",
        "a standing student server with a weight push",
        ("inference.url=http://127.0.0.1:9/v1", "inference.weight_transfer=gloo"),
        "[inference.url, inference.weight_transfer]",
    ),
    Case(
        "secret",
        "a standing student server without its key",
        ("inference.url=http://127.0.0.1:9/v1", f"inference.api_key_env={UNSET_KEY_ENV}"),
        "[inference.api_key_env]",
    ),
    Case("endpoint", "no standing student server there", ("inference.url=http://127.0.0.1:9/v1",), "[inference.url]"),
    Case("endpoint", "base_url not a URL", (*EXTERNAL, "teacher.base_url=api.example.com"), "[teacher.base_url]"),
    Case(
        "secret",
        "API key env var not set",
        (*EXTERNAL, f"teacher.api_key_env={UNSET_KEY_ENV}"),
        "[teacher.api_key_env]",
    ),
    Case(
        "secret",
        "teacher key in the launcher's own server-key var",
        (*EXTERNAL, "teacher.api_key_env=VLLM_API_KEY"),
        "[teacher.api_key_env]",
    ),
    Case(
        "secret",
        "API key in a vendor's header",
        (*EXTERNAL, "+teacher.headers.X-Goog-Api-Key=AIza-x"),
        "[teacher.headers.X-Goog-Api-Key]",
    ),
    Case(
        "secret",
        "secret header's env var not set",
        (*EXTERNAL, f"+teacher.header_envs.X-Team-Token={UNSET_KEY_ENV}"),
        "[teacher.header_envs.X-Team-Token]",
    ),
    Case(
        "secret",
        "credential in a header",
        (*EXTERNAL, "+teacher.headers.Authorization=Bearer-x"),
        "[teacher.headers.Authorization]",
    ),
    Case(
        "secret",
        "password in the teacher's URL",
        (*EXTERNAL, "teacher.base_url=https://me:sk-x@api.example.com/v1"),
        "[teacher.base_url]",
    ),
    Case(
        "endpoint",
        "a provider field the orchestrator sets",
        (*EXTERNAL, "+teacher.extra_body.max_tokens=64"),
        "[teacher.extra_body.max_tokens]",
    ),
    Case(
        "endpoint",
        "a temperature an endpoint without sampling settings cannot honour",
        (*EXTERNAL, "teacher.api.sampling_params=false", "orchestrator.sampling.temperature=0.7"),
        "[teacher.api.sampling_params, orchestrator.sampling.temperature, orchestrator.eval.temperature]",
    ),
    Case("judge", "a judged source and no judge's server", ("task.verifier=judge",), "[judge.teacher, task.verifier]"),
    Case("judge", "a judge named and no source judged", ("judge.teacher=j",), "[judge.teacher, task.verifier]"),
    Case(
        "judge",
        "a rubric that never shows the judge the reply",
        ("task.verifier=judge", JUDGE, "judge.teacher=j", "judge.rubric='Is {answer} right?'"),
        "[judge.rubric]",
    ),
    Case(
        "judge",
        "a reward model that is not a sequence classifier",
        ("task.verifier=judge", JUDGE, "judge.teacher=j", "judge.verdict=reward_model"),
        "[teachers.j.model, judge.verdict]",
    ),
    Case("output dir", "run dir under a file", ("hydra.run.dir=/etc/hostname/run",), "[hydra.run.dir]"),
    Case("output dir", "run dir of an earlier run, no resume", ("max_steps=3",), "[hydra.run.dir, ckpt.resume]"),
    Case("sweep", "one bad point in a sweep", ("-m", "trainer.loss.teacher_tau=0,0.5"), "sweep job #1"),
]


def env() -> dict[str, str]:
    """No GPUs, no SLURM job, the external teacher's key set and no other: every machine gives the same messages."""
    dropped = (UNSET_KEY_ENV, "VLLM_API_KEY")
    out = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("SLURM_")}
    return out | {"CUDA_VISIBLE_DEVICES": "", "OPENAI_API_KEY": "sk-not-a-real-key", "VLLM_API_KEY": "a-server-key"}


def earlier_run(run_dir: Path) -> Path:
    """A run dir that already holds a run's files, which no bad input may touch."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    (run_dir / "checkpoints" / "step_2").mkdir(parents=True)
    return run_dir


def model_dirs(root: Path) -> dict[str, Path]:
    """The cases' model dirs, by placeholder: tiny models of the default architecture, built here untrained (the
    checks read their tokenizers and configs; nothing starts)."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel

    from prime_rl.config.schema import TaskConfig, TinyModelConfig
    from prime_rl.models.tiny import build_tiny_model, save_model
    from prime_rl.models.tokenizer import (
        CHAT_TEMPLATE,
        SPECIAL_TOKENS,
        as_transformers,
        build_bpe_tokenizer,
        build_tokenizer,
    )
    from prime_rl.prepare.tiny import conversations
    from prime_rl.tasks.registry import load_task

    words = Tokenizer(WordLevel({t: i for i, t in enumerate([*SPECIAL_TOKENS, "reverse"])}, unk_token="<|pad|>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizers = {
        STUDENT: build_tokenizer(),
        BPE_TEACHER: build_bpe_tokenizer(conversations(load_task(TaskConfig())), 320),
        WORDS_TEACHER: as_transformers(words, pad="<|pad|>", chat_template=CHAT_TEMPLATE),
    }
    dirs = {}
    for i, (placeholder, tokenizer) in enumerate(tokenizers.items()):
        dirs[placeholder] = root / f"model{i}"
        save_model(build_tiny_model(TinyModelConfig(), tokenizer), tokenizer, dirs[placeholder])
    return dirs


def message(proc: subprocess.CompletedProcess, run_dir: Path, models: dict[str, Path]) -> str:
    """The error line as the docs show it: the test's own run dir written as <run dir>, model dirs as theirs."""
    line = proc.stderr.strip().replace(str(run_dir), "<run dir>")
    for placeholder, path in models.items():
        line = line.replace(str(path), placeholder)
    return line


def run_case(case: Case, run_dir: Path, output_dir: Path, models: dict[str, Path]) -> subprocess.CompletedProcess:
    """`python launch.py <the case's args>` (tests/forked_launch.py), its output kept in `output_dir`."""
    args = list(case.args)
    for placeholder, path in models.items():
        args = [a.replace(placeholder, str(path)) for a in args]
    where = (
        []
        if any(a.startswith("hydra.run.dir=") for a in args)
        else [f"hydra.run.dir={run_dir}", f"hydra.sweep.dir={run_dir}"]
    )
    return run_launch([*args, *where], env(), output_dir, timeout=120)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return model_dirs(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def results(tmp_path_factory, models) -> dict[Case, tuple[subprocess.CompletedProcess, Path]]:
    """Every case run once (four at a time), each against a run dir that already holds a run's files."""

    def one(case: Case):
        run_dir = earlier_run(tmp_path_factory.mktemp("run"))
        return case, (run_case(case, run_dir, tmp_path_factory.mktemp("output"), models), run_dir)

    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.parametrize("case", CASES, ids=[" ".join(c.args) for c in CASES])
def test_invalid_input_exits_2_with_one_line_and_touches_nothing(case, results):
    proc, run_dir = results[case]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and case.names in line and "; fix: " in line, line
    # nothing started (the launcher's own log would be the first file), nothing already there lost
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == [
        "checkpoints",
        "checkpoints/step_2",
        "metrics.jsonl",
    ]
    assert (run_dir / "metrics.jsonl").read_text() == '{"step": 0}\n'


def test_the_catalogue_has_at_least_30_cases_of_every_kind_the_issue_names():
    kinds = {c.kind for c in CASES}
    assert len(CASES) >= 30
    assert {
        "wrong type",
        "out of range",
        "unknown key",
        "mode conflict",
        "missing file",
        "GPUs",
        "endpoint",
        "output dir",
    } <= kinds


def test_the_docs_table_is_generated_from_these_cases(results, models):
    messages = {case: message(proc, run_dir, models) for case, (proc, run_dir) in results.items()}
    assert DOC.read_text() == render(messages), "regenerate it: python -m tests.test_invalid_inputs"


def render(messages: dict[Case, str]) -> str:
    rows = [
        f"| {i} | {c.kind} | {c.what} | `{' '.join(c.args)}` | {messages[c].replace('|', '&#124;')} |"
        for i, c in enumerate(CASES, 1)
    ]
    return "\n".join(
        [
            "# Invalid inputs",
            "",
            "Each of these command lines (after `python launch.py`) exits with code 2 and the one line shown, before",
            "any process starts or any job is submitted; nothing in the run dir is touched. Generated from the cases",
            "in `tests/test_invalid_inputs.py` by `python -m tests.test_invalid_inputs`, which runs each one;",
            "the test suite checks that this file matches what the launcher says.",
            "",
            "| # | kind | mistake | command line | error |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main(argv: list[str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        models = model_dirs(Path(tmp))
        run_dirs = [earlier_run(Path(tmp) / str(i)) for i in range(len(CASES))]
        messages = {c: message(run_case(c, d, Path(tmp), models), d, models) for c, d in zip(CASES, run_dirs)}
    DOC.write_text(render(messages))
    print(f"wrote {DOC} ({len(CASES)} cases)")


if __name__ == "__main__":
    main(sys.argv[1:])
