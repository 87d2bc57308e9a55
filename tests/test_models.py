"""The built-in tiny tokenizer and model, the cached build and the SFT warm start / CLI."""

import json
import os
import subprocess
import sys
import threading
from dataclasses import replace

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer

from prime_rl.config import compose_config
from prime_rl.config.schema import Config, TaskConfig, TinyModelConfig, WarmStartConfig
from prime_rl.config.user_error import UserError
from prime_rl.launcher.preflight.teachers import teacher_alignments
from prime_rl.models import student_dir, teacher_dir
from prime_rl.models.chat import prompt_ids
from prime_rl.models.prompt_lengths import prompt_lengths
from prime_rl.models.recipe import RECIPE_FILE
from prime_rl.models.tiny import build_tiny_model, save_model
from prime_rl.models.tokenizer import build_tokenizer
from prime_rl.models.tokenizer_class import RECORD_KEY, load_tokenizer, recorded_class
from prime_rl.models.tokenizer_files import same_tokenizer_files
from prime_rl.prepare import prepare_model, prepare_student, prepare_teacher, tiny
from prime_rl.prepare.greedy_eval import eval_reward
from prime_rl.protocol.atomic import STABLE_MARKER
from prime_rl.tasks import Example, load_task
from prime_rl.trainer.data import collate
from prime_rl.trainer.supervised import sft_train, supervised_samples
from tests.conftest import ROOT

torch.set_num_threads(1)  # one thread is fastest on small shared CPUs
QUICK = WarmStartConfig(steps=2, batch_size=8, warmup_steps=1)
TEXTS = ["reverse: abcde", "héllo wörld\n\t 日本 🎉", "<|im_start|>user\nhi<|im_end|>\n", "sort: zyx  \n\n"]


def test_tokenizer_is_deterministic_and_round_trips(tmp_path):
    tok = build_tokenizer()
    assert tok.backend_tokenizer.to_str() == build_tokenizer().backend_tokenizer.to_str()
    assert len(tok) <= TinyModelConfig().vocab_size
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text
    ids = prompt_ids(tok, "reverse: abcde")
    tokens = ["<|im_start|>", "user\n", "reverse: ", *"abcde", "<|im_end|>", "Ċ", "<|im_start|>", "assistant\n"]
    assert tok.convert_ids_to_tokens(ids) == tokens
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|pad|>"
    # What transformers and vLLM load from a model dir tokenizes exactly like the in-memory tokenizer.
    save_model(build_tiny_model(TinyModelConfig(), tok), tok, tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert [loaded.encode(t) for t in TEXTS] == [tok.encode(t) for t in TEXTS]
    assert prompt_ids(loaded, "sort: ab") == prompt_ids(tok, "sort: ab")
    assert loaded.eos_token_id == tok.eos_token_id and loaded.pad_token_id == tok.pad_token_id


@pytest.mark.parametrize("family", ["tiny", "tiny_qwen3"])
def test_a_built_models_tokenizer_loads_as_autotokenizer_loads_it(family):
    """A built-in model records AutoTokenizer's class for its tokenizer (qwen2: Qwen2Tokenizer, qwen3: the generic
    TokenizersBackend); load_tokenizer uses it without AutoTokenizer's import: the same class, ids, special tokens
    and chat template. A record of another transformers version, or none, goes through AutoTokenizer."""
    import transformers

    model = prepare_student(compose_config([f"model={family}"]))
    recorded = json.loads((model / RECIPE_FILE).read_text())[RECORD_KEY]
    fast, auto = load_tokenizer(model), AutoTokenizer.from_pretrained(model)
    assert recorded == {"class": type(auto).__name__, "transformers": transformers.__version__}
    assert type(fast) is type(auto)
    assert [fast.encode(t) for t in TEXTS] == [auto.encode(t) for t in TEXTS]
    assert prompt_ids(fast, "sort: ab") == prompt_ids(auto, "sort: ab")
    assert fast.all_special_tokens == auto.all_special_tokens and fast.chat_template == auto.chat_template
    assert recorded_class(model, transformers.__version__) == recorded["class"]
    assert recorded_class(model, "0.0") is None and recorded_class(model.parent, transformers.__version__) is None


def test_tiny_model_is_untied_with_the_expected_size():
    model = build_tiny_model(TinyModelConfig(), build_tokenizer())
    assert not model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == 377_984
    same_seed = build_tiny_model(TinyModelConfig(), build_tokenizer())
    assert torch.equal(model.lm_head.weight, same_seed.lm_head.weight)


def test_supervised_samples_train_the_answer_and_its_end_of_turn_only():
    tok = build_tokenizer()
    batch = collate(supervised_samples(tok, [Example("reverse: ab", "ba"), Example("reverse: abcd", "dcba")]), 0)
    targets = [row[mask.bool()].tolist() for row, mask in zip(batch.input_ids, batch.loss_mask)]
    assert targets == [tok.encode("ba") + [tok.eos_token_id], tok.encode("dcba") + [tok.eos_token_id]]
    assert batch.attention_mask.sum(1).tolist() == [9 + 3, 11 + 5]


@pytest.mark.slow
def test_prepare_model_builds_once_then_reuses(tmp_path, monkeypatch):
    builds = []
    real_build = tiny._build
    monkeypatch.setattr(tiny, "_build", lambda *a: builds.append(a) or real_build(*a))
    args = ("tiny", TinyModelConfig(), QUICK, TaskConfig(num_train=64), str(tmp_path))
    # Two launchers at once: the file lock makes the second wait and reuse the first's build.
    results = []
    threads = [threading.Thread(target=lambda: results.append(prepare_model(*args))) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(builds) == 1 and results[0] == results[1]
    path = results[0]
    done_mtime = (path / STABLE_MARKER).stat().st_mtime_ns
    assert prepare_model(*args) == path and (path / STABLE_MARKER).stat().st_mtime_ns == done_mtime
    assert json.loads((path / "recipe.json").read_text())["warm_start"]["steps"] == QUICK.steps
    assert AutoModelForCausalLM.from_pretrained(path).num_parameters() == 377_984
    assert not list((tmp_path / "models").glob("*.tmp"))  # no leftover of the build
    other = prepare_model("tiny", TinyModelConfig(), replace(QUICK, seed=1), TaskConfig(num_train=64), str(tmp_path))
    assert other != path and len(builds) == 2
    assert prepare_model(str(tmp_path), *args[1:]) == tmp_path.resolve()


def test_prepare_student_and_teacher_match_their_dirs(tmp_path, monkeypatch):
    monkeypatch.setattr(tiny, "_build", lambda out, *a: None)
    cfg = Config()
    cfg.model.cache_dir = str(tmp_path)
    cfg.teacher.model = "tiny"
    assert prepare_student(cfg) == student_dir(cfg) and prepare_teacher(cfg) == teacher_dir(cfg)
    assert student_dir(cfg) != teacher_dir(cfg)


def test_a_mix_sources_mode_and_loss_weights_leave_its_models_as_they_are():
    """A warm start learns the sources' data, not how the run trains on them: the same build for either."""
    mix = "task.mix=[{name:reverse},{name:sort%s}]"
    plain = compose_config(["task=mix", mix % "", "training_mode=opd"])
    moded = compose_config(["task=mix", mix % ",mode:opd,adv_tau:0,teacher_tau:2", "teacher=local_vllm"])
    assert student_dir(plain) == student_dir(moded) and teacher_dir(plain) == teacher_dir(moded)
    other_data = compose_config(["task=mix", mix % ",num_train:500", "training_mode=opd"])
    assert student_dir(other_data) != student_dir(plain)


def test_a_warm_start_on_a_built_in_task_shares_the_build_of_a_run_on_it():
    """model.warm_start.task=lookup learns lookup's tool calls as a task=lookup run's student does: one build, which
    a run on a task without calls to demonstrate (a verifiers taskset with a tool) starts from."""
    on_lookup = compose_config(["task=lookup", "model.warm_start.steps=120"])
    first = ["task=verifiers", "task.env=vault_lookup", "model.warm_start.steps=120"]
    assert student_dir(compose_config([*first, "model.warm_start.task=lookup"])) == student_dir(on_lookup)
    assert student_dir(compose_config([*first, "model.warm_start.task=reverse"])) != student_dir(on_lookup)


def test_prompt_lengths_are_measured_once_per_tokenizer_and_prompts(tmp_path):
    """The launcher's prompt check reads them from the cache unless the tokenizer's files, the template's arguments
    or the prompts changed; a changed one is measured anew, with the student's tokenizer."""
    student = tmp_path / "student"
    build_tokenizer().save_pretrained(student)
    overrides = [f"model.name={student}", f"model.cache_dir={tmp_path / 'cache'}"]
    loads = []

    def tokenizer():
        loads.append(1)
        return AutoTokenizer.from_pretrained(student)

    def measured(prompts, *more):
        return sorted(prompt_lengths(compose_config([*overrides, *more]), prompts, tokenizer).elements())

    prompts = ["reverse: abc", "reverse: a much longer prompt", "reverse: abc"]
    truth = sorted(len(prompt_ids(AutoTokenizer.from_pretrained(student), p)) for p in prompts)
    assert measured(prompts) == truth and len(loads) == 1
    assert measured(prompts) == truth and len(loads) == 1  # from the cache
    assert measured(prompts[1:]) == truth[1:] and len(loads) == 2
    template = student / "chat_template.jinja"
    template.write_text("{{ 'SYSTEM: be brief' }}" + template.read_text())
    assert measured(prompts) > truth and len(loads) == 3
    measured(prompts, "+model.chat_template_args.x=1")
    assert len(loads) == 4
    for entry in (tmp_path / "cache" / "prompt_lengths").iterdir():
        entry.write_text("[1, 2")  # cut short: measured again, not trusted
    assert measured(prompts) > truth and len(loads) == 5


def test_an_opd_teacher_with_the_students_tokenizer_files_is_checked_without_loading_a_tokenizer(tmp_path):
    """The launcher's opd check (launcher/preflight/) compares a local teacher's tokenizer with the student's:
    the same files tell it without loading either; other files are loaded and compared, and a vocabulary that
    differs is refused where the run wants the teacher to score the student's tokens (teacher.alignment=tokens)."""
    student, same, other = tmp_path / "student", tmp_path / "same", tmp_path / "other"
    for d in (student, same, other):
        build_tokenizer().save_pretrained(d)
    added = json.loads((other / "tokenizer.json").read_text())
    added["added_tokens"].append({**added["added_tokens"][-1], "id": 300, "content": "<|other|>"})
    (other / "tokenizer.json").write_text(json.dumps(added))
    assert same_tokenizer_files(student, same) and not same_tokenizer_files(student, other)
    assert not same_tokenizer_files(tmp_path / "none", tmp_path / "none")  # no files: only loading tells
    loads = []

    def tokenizer():
        loads.append(1)
        return AutoTokenizer.from_pretrained(student)

    def check(teacher):
        overrides = [
            "training_mode=opd",
            f"model.name={student}",
            f"teacher.model={teacher}",
            "teacher.alignment=tokens",
        ]
        cfg = compose_config(overrides)
        teacher_alignments(cfg, load_task(cfg.task), tokenizer)

    check(same)
    assert loads == []
    with pytest.raises(UserError) as err:
        check(other)
    assert err.value.keys == ["teacher.alignment"]
    assert loads == [1]


@pytest.mark.slow
def test_warm_start_improves_greedy_reward():
    task = load_task(TaskConfig(num_train=2000, num_eval=64))
    tok = build_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tok).eval()
    before = eval_reward(model, tok, task)
    sft_train(model, tok, task.train, WarmStartConfig(steps=50))
    after = eval_reward(model, tok, task)
    assert before < 0.1 and after > before + 0.2, (before, after)


@pytest.mark.integration
@pytest.mark.slow
def test_sft_cli_trains_and_saves_a_loadable_model(tmp_path):
    data = tmp_path / "train.jsonl"
    rows = [{"prompt": e.prompt, "answer": e.answer} for e in load_task(TaskConfig(num_train=32)).train]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "prime_rl.finetune", "--data", str(data), "--model", "tiny", "--out", str(out)]
    subprocess.run(cmd + ["--steps", "3", "--batch-size", "8", "--lr", "1e-3"], check=True, timeout=120)
    model = AutoModelForCausalLM.from_pretrained(out)
    init = build_tiny_model(TinyModelConfig(), build_tokenizer())
    assert not torch.equal(model.lm_head.weight, init.lm_head.weight)  # trained, not just saved
    assert AutoTokenizer.from_pretrained(out).encode("reverse: ab") == build_tokenizer().encode("reverse: ab")


@pytest.mark.integration
@pytest.mark.slow
def test_launcher_prepare_only_runs_plain_sft_on_a_jsonl_task(tmp_path):
    """The Hydra way to the SFT entrypoint: warm-start a student on your own JSONL, start nothing else."""
    from tests.conftest import ROOT, launch_cmd

    data = tmp_path / "train.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": f"reverse: {w}", "answer": w[::-1]}) + "\n" for w in ["abc", "hello", "kite"] * 20
        )
    )
    env = {**os.environ, "PRIME_RL_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        launch_cmd(
            "task=jsonl",
            f"task.path={data}",
            "task.num_eval=6",
            "model.warm_start.steps=3",
            "launcher.prepare_only=true",
            f"hydra.run.dir={tmp_path / 'run'}",
        ),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    [built] = [p for p in (tmp_path / "cache" / "models").glob("tiny-jsonl-3-*") if p.is_dir()]
    assert (built / "STABLE").exists() and json.loads((built / "recipe.json").read_text())["task"]["path"] == str(data)
    assert str(built) in proc.stderr.replace("\n", "")  # the dir is printed for the user to use
    assert not (tmp_path / "run" / "logs").exists()  # no process was started


@pytest.mark.integration
@pytest.mark.parametrize("role", ["prime_rl.orchestrator", "prime_rl.finetune"])
def test_a_role_run_by_hand_reports_a_users_mistake_in_one_line(tmp_path, role):
    """Run alone, a role meets mistakes the launcher would have caught first (here: a data file that is not
    there): one `error:` line and exit code 2, no traceback."""
    missing = tmp_path / "no_such.jsonl"
    if role == "prime_rl.finetune":
        args = ["--data", str(missing), "--model", "tiny", "--out", str(tmp_path / "out")]
        args += ["--steps", "1", "--batch-size", "1", "--lr", "1e-3"]
    else:  # a fixed server port: the orchestrator does not wait for the launcher to publish one
        cfg = compose_config(["task=jsonl", f"task.path={missing}", "inference.port=8000", "monitor=off"])
        cfg.run_dir = str(tmp_path / "run")
        config = tmp_path / "orchestrator.yaml"
        config.write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        args = ["--config", str(config)]
    done = subprocess.run([sys.executable, "-m", role, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines[-1].startswith("error: ") and str(missing) in lines[-1]
