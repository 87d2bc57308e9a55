"""A mode is one object (config/modes.py): opsd, the student as its own scorer, and a researcher's own mode from a
file outside the package, for real; and what the facts decide (servers, refusals, where the name appears)."""

import ast
import io
import json
import math
import re
import shutil
import tokenize
from pathlib import Path

import pytest
import yaml

from prime_rl.config import ConfigError, compose_config
from prime_rl.config.modes import MODES, Scorer, mode_config, mode_named, modes_with
from prime_rl.config.rules import check_rules
from prime_rl.config.schema import scorer_knobs
from prime_rl.inference.server import vllm_command
from prime_rl.orchestrator.algo import part
from prime_rl.tasks import Example
from prime_rl.trainer.loss import Objective
from tests.conftest import ROOT
from tests.test_e2e_rl import assert_pushed_over_gloo, launch, rows
from tests.test_episodes import ON_POLICY

STRING_PARTS = (tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING))  # f-strings' text on 3.12
FEW_STEPS = ["debug=smoke", "orchestrator.batch_size=32"]


def student_argv(*overrides: str) -> list[str]:
    cfg = compose_config(list(overrides))
    return vllm_command(cfg, Path("/m"), "student", 0, [], 0, student=True)[0]


def test_the_server_that_scores_is_asked_for_the_top_k_and_a_teacher_scoring_keeps_a_token_free():
    """What a run's modes ask of a server follows from their scorer: opsd's top k from the student's server, opd's
    from the teacher's (and one token of the student's context for it)."""
    topk = ["trainer.loss.distill=topk", "trainer.loss.distill_top_k=8"]
    opsd = student_argv("training_mode=opsd", *topk)
    assert opsd[opsd.index("--max-logprobs") + 1] == "8" and opsd[opsd.index("--max-model-len") + 1] == "512"
    opd = student_argv("training_mode=opd", *topk)
    assert "--max-logprobs" not in opd and opd[opd.index("--max-model-len") + 1] == "511"
    teacher_cfg = compose_config(["training_mode=opd", *topk])
    teacher = vllm_command(teacher_cfg, Path("/t"), "teacher", 0, [], 0, student=False)[0]
    assert teacher[teacher.index("--max-logprobs") + 1] == "8"


def test_a_scorer_is_shown_the_reference_answer_after_the_prompts_own_system_message():
    ex = Example("reverse: abc", "cba", system="Be brief.")
    assert ex.shown("Answer: {answer}").messages == [
        {"role": "system", "content": "Be brief.\n\nAnswer: cba"},
        {"role": "user", "content": "reverse: abc"},
    ]
    assert Example("q", "a").shown("{answer}!").messages[0] == {"role": "system", "content": "a!"}


def test_a_mode_is_named_by_import_path_and_its_knobs_are_typed():
    mode = mode_named("examples.reward_weighted_sft:MODE")
    assert mode.name == "reward_weighted_sft" and mode.scorer == Scorer.none and not mode.teacher
    cfg = compose_config(["task=mix", "task.mix=[{name:reverse,mode:'examples.reward_weighted_sft:MODE'}]"])
    assert mode_config(cfg, mode).beta == 0.5  # its dataclass's default: no node set
    with pytest.raises(ConfigError) as err:
        mode_named("ppo")
    assert err.value.keys == ["training_mode"] and "'ppo'" in err.value.problem


OWN = "examples.reward_weighted_sft:MODE"


def test_a_modes_parts_are_built_with_the_mode_and_its_typed_knobs():
    """The orchestrator part and the loss of a built-in mode and of an own one each hold their mode and the knobs
    modes.<name> sets, typed by the mode's dataclass; a mode without knobs gets None."""
    opsd = compose_config(["training_mode=opsd", "modes.opsd.context='Shown: {answer}'"])
    algo = part(opsd, MODES["opsd"])
    assert algo.mode is MODES["opsd"] and algo.knobs.context == "Shown: {answer}"
    assert part(opsd, MODES["rl"]).knobs is None
    own = compose_config(["task=mix", f"task.mix=[{{name:reverse,mode:'{OWN}'}}]", "+modes.reward_weighted_sft.beta=2"])
    mode = mode_named(OWN)
    assert part(own, mode).mode is mode and part(own, mode).knobs.beta == 2.0
    loss = Objective(own).mode_loss(mode.name, 1.0, 0.0)
    assert type(loss).__name__ == "RewardWeightedNll" and loss.knobs.beta == 2.0 and loss.knobs.max_weight == 20.0


def test_an_own_mode_once_named_is_listed_where_rules_list_the_modes_with_a_fact():
    """modes_with lists the registered modes: the built-ins, and an own mode after a config named it, by the import
    path training_mode takes; a rule's refusal then offers it (reward_weighted_sft learns from advantages)."""
    mode_named(OWN)
    listed = modes_with(lambda m: m.advantages and not m.scores_tokens).split("|")
    assert listed[0] == "rl" and OWN in listed and "opd" not in listed
    cfg = compose_config(["task=mix", "task.mix=[{name:reverse,mode:sft,adv_tau:0.5}]", "teacher=local_vllm"])
    with pytest.raises(ConfigError) as err:
        check_rules(cfg, 0)
    assert err.value.keys == ["task.mix[0].adv_tau", "task.mix[0].mode"] and OWN in err.value.fix


def test_the_scorer_knobs_are_the_loss_fields_so_marked_and_each_is_refused_where_no_mode_scores():
    """trainer.loss's fields marked scorer_knob, each refused in rl (whose mode scores nothing) at another value."""
    other = {
        "teacher_tau": "0.5",
        "distill": "topk",
        "distill_top_k": "8",
        "distill_kl": "forward",
        "distill_beta": "0.3",
        "teacher_adv_clip": "1.0",
        "teacher_adv_center": "false",
    }
    assert sorted(scorer_knobs()) == sorted(other)
    for knob, value in other.items():
        with pytest.raises(ConfigError) as err:
            check_rules(compose_config([f"trainer.loss.{knob}={value}"]), 0)
        assert err.value.keys[0] == f"trainer.loss.{knob}", knob


MODE_NAME = re.compile(r"(?<![\w-])(rl|opd|sft|opsd)(?![\w-])")  # not prime-rl
OWN_FILES = {"config/modes.py", *(f"orchestrator/algo/{name}.py" for name in MODES)}  # the registry, their parts


def code_strings(source: str) -> list[str]:
    """The string literals of a module that are not docstrings (f-strings' text too)."""
    docstrings = {
        node.body[0].lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.string for t in tokens if t.type in STRING_PARTS and t.start[0] not in docstrings]


def test_no_mode_is_named_in_code_outside_its_own_files_and_the_registry():
    """The extension point: code names a mode through its Mode (MODES, SUPERVISED) or its facts (modes_with), never
    by a literal, but in its own files; the one other literal is the schema's default training_mode. opsd, the last
    mode added, is named (comments too) in its Mode, its part and the schema's one-line docs."""
    package = ROOT / "prime_rl"
    named = {
        path.relative_to(package).as_posix(): hits
        for path in package.rglob("*.py")
        if path.relative_to(package).as_posix() not in OWN_FILES
        and (hits := [s for s in code_strings(path.read_text()) if MODE_NAME.search(s)])
    }
    assert named == {"config/schema.py": ['"rl"']}, named
    opsd = [path for path in package.rglob("*.py") if re.search(r"\bopsd\b", path.read_text(), re.IGNORECASE)]
    assert 0 < len(opsd) <= 5, opsd
    rules = [path.read_text() for path in (package / "config" / "rules").glob("*.py")]
    assert len(rules) >= 4 and all(len(source.splitlines()) < 300 for source in rules)


@pytest.mark.vllm
def test_opsd_scores_the_students_tokens_with_its_own_server_and_the_reference_answer(tmp_path):
    """training_mode=opsd with the top-k JSD (GKD's, beta 0.3): one vLLM server (the student's) samples and scores,
    every sample is scored under its privileged prompt, and the trainer's top-k term sees the scores. The weights
    reach that server over gloo (inference.weight_transfer=gloo, the CPU counterpart of nccl), pushed in turns by
    the one trainer process of the colocated layout: no weight files, and on policy the sampler's logprobs are the
    trainer's to float noise (a server one step behind would show 1e-4 or more) up to the last evaluation's."""
    run_dir = tmp_path / "run"
    run = launch(
        run_dir,
        "training_mode=opsd",
        "trainer.loss.distill=topk",
        "trainer.loss.distill_top_k=8",
        "trainer.loss.distill_kl=jsd",
        "trainer.loss.distill_beta=0.3",
        "orchestrator.log_samples=4",
        "inference.weight_transfer=gloo",
        *FEW_STEPS,
        *ON_POLICY,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert_pushed_over_gloo(run_dir, "colocated")
    train = [r for r in rows(run_dir) if "loss" in r]
    assert 0 <= train[0]["eval/privileged_reward"] <= 1 and "eval/privileged_reward" not in train[1], train[0]
    for r in train:
        assert r["time/self_score"] > 0 and r["self_score/too_long"] == 0, r
        # the privileged prompt moves the distribution: a JSD over the top 8 that is not 0, at most log 2
        assert 0 < r["distill/topk_kl"] <= math.log(2) and r["distill/teacher_tail"] >= 0, r
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == [
        "inference.log",
        "launcher.log",
        "orchestrator.log",
        "trainer.log",
    ]  # no teacher server
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {(s["mode"], s["teacher"]) for s in samples} == {("opsd", "self")}
    # the student's server answered a scoring request (prompt logprobs) after each step's sampling
    assert (run_dir / "logs" / "inference.log").read_text().count("POST /v1/completions") >= 2 * 3


@pytest.mark.vllm
def test_a_mode_of_ones_own_runs_from_a_file_outside_the_package(tmp_path, monkeypatch):
    """examples/reward_weighted_sft.py copied to a folder of the user's, with its config group: chosen with
    training_mode=<its option> on Hydra's search path, its knob set on the command line, its loss trains."""
    lab = tmp_path / "lab"
    (lab / "conf" / "training_mode").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "reward_weighted_sft.py", lab / "my_awr.py")
    option = yaml.safe_load((ROOT / "examples" / "conf" / "training_mode" / "reward_weighted_sft.yaml").read_text())
    option["training_mode"] = "my_awr:MODE"
    (lab / "conf" / "training_mode" / "awr.yaml").write_text("# @package _global_\n" + yaml.safe_dump(option))
    monkeypatch.setenv("PYTHONPATH", str(lab))
    run_dir = tmp_path / "run"
    run = launch(
        run_dir,
        f"hydra.searchpath=[file://{lab / 'conf'}]",
        "training_mode=awr",
        "modes.reward_weighted_sft.beta=0.25",
        "orchestrator.log_samples=2",
        *FEW_STEPS,
        *ON_POLICY,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    train = [r for r in rows(run_dir) if "loss" in r]
    assert [r["step"] for r in train] == [0, 1, 2]
    # its loss's own metric: the mean of exp(A / 0.25) capped at 20 over the trained tokens, above 0 and at most 20
    assert all(0 < r["rwsft/weight"] <= 20 for r in train), train
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["mode"] for s in samples} == {"reward_weighted_sft"}
    trainer = yaml.safe_load((run_dir / "configs" / "trainer.yaml").read_text())
    assert trainer["training_mode"] == "my_awr:MODE" and trainer["modes"]["reward_weighted_sft"]["beta"] == 0.25
