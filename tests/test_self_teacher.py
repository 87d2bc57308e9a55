"""opsd's self-teacher (modes.opsd.teacher): the weights that score the student's tokens under its privileged prompt.
The live policy (the default, tests/test_modes.py); the starting weights, under LoRA the student server's own base
model, else a server of them; and a lagged copy, under LoRA an adapter, else loaded into the server of the starting
weights. Which weights score is checked against transformers and peft on a real vLLM server; the run in full, on
real vLLM, with the lagged teacher of full weights, on the built-in model that reads its context."""

import asyncio
import json
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from prime_rl.config import ConfigError, check_rules, compose_config
from prime_rl.config.modes import MODES, SelfTeacher
from prime_rl.config.teachers import REFERENCE, local_teachers
from prime_rl.inference.client import InferenceClient
from prime_rl.launcher.plan import build_plan
from prime_rl.models.chat import prompt_ids
from prime_rl.orchestrator.algo.opsd import OPSD, self_scorer
from prime_rl.prepare import prepare_student
from prime_rl.protocol.atomic import publish_dir
from prime_rl.protocol.run_dir import RunDir
from tests.test_e2e_rl import launch, rows, summary
from tests.test_inference_vllm import PROMPTS, hf_scores
from tests.vllm_server import serve

OPSD_LORA = ["training_mode=opsd", "lora=on"]


def test_a_lagged_teacher_needs_its_lag_and_exported_weights_and_each_is_one_line():
    lagged = ["modes.opsd.teacher=lagged", "modes.opsd.lag=4"]
    with pytest.raises(ConfigError) as err:
        check_rules(compose_config(["training_mode=opsd", "modes.opsd.teacher=lagged"]), 0)
    assert err.value.keys == ["modes.opsd"]
    with pytest.raises(ConfigError) as err:
        check_rules(compose_config([*OPSD_LORA, "modes.opsd.lag=4"]), 0)  # a lag, and no lagged teacher
    assert err.value.keys == ["modes.opsd"]
    with pytest.raises(ConfigError) as err:  # full weights pushed: no export to load the lagged copy from
        check_rules(compose_config(["training_mode=opsd", *lagged, "inference.weight_transfer=gloo"]), 0)
    assert err.value.keys == ["modes.opsd.teacher", "inference.weight_transfer"]
    check_rules(compose_config([*OPSD_LORA, *lagged]), 0)
    check_rules(compose_config(["training_mode=opsd", *lagged]), 0)


def test_the_starting_weights_score_on_the_students_server_under_lora_else_on_a_server_of_their_own(tmp_path):
    lora = compose_config([*OPSD_LORA, "modes.opsd.teacher=initial"])
    full = compose_config(["training_mode=opsd", "modes.opsd.teacher=initial"])
    assert local_teachers(lora) == [] and local_teachers(full) == [REFERENCE]  # under LoRA: no second server
    servers = [r.name for r in build_plan(full, tmp_path, []).roles if r.is_server]
    assert servers == ["inference", f"teacher_inference_{REFERENCE}"]
    lagged = compose_config([*OPSD_LORA, "modes.opsd.teacher=lagged", "modes.opsd.lag=2"])
    command = build_plan(lagged, tmp_path / "lagged", []).role("inference").command
    assert command[command.index("--max-loras") + 1] == "2"  # the live adapter and the lagged one
    assert "--max-loras" not in build_plan(lora, tmp_path / "lora", []).role("inference").command
    assert local_teachers(lagged) == []
    # without LoRA a lagged copy is loaded into a server of the starting weights
    assert local_teachers(compose_config(["training_mode=opsd", "modes.opsd.teacher=lagged", "modes.opsd.lag=2"])) == [
        REFERENCE
    ]


@pytest.mark.vllm
def test_each_self_teacher_scores_with_the_weights_it_names_on_a_real_server(tmp_path):
    """A real vLLM server of the student with a trained-looking adapter (random, non-zero B): the live teacher scores
    as peft's adapted model, the initial one as the base model (the server's own, no second copy), and the lagged
    one as the adapter it was refreshed from, even after the live adapter moved on. Then without LoRA: the lagged
    copy of full weights is loaded into the server of the starting weights (here the same server) and scores as
    the weights it was refreshed from, not the newer ones."""
    cfg = compose_config([*OPSD_LORA, "modes.opsd.teacher=lagged", "modes.opsd.lag=2"])
    student = prepare_student(cfg)
    tok = AutoTokenizer.from_pretrained(student)
    base = AutoModelForCausalLM.from_pretrained(student)
    run_dir = RunDir(tmp_path / "run")
    adapters = [adapter(student, tmp_path, seed) for seed in (1, 2)]
    publish_dir(run_dir.weights(0), lambda tmp: save(adapters[0], tmp))
    prompts = [prompt_ids(tok, p) for p in PROMPTS[:3]]
    completions = [tok.encode(" a b c")] * 3
    full = [moved(student, seed) for seed in (1, 2)]  # two steps of full fine-tuning
    models = {"base": base, "adapter 1": adapters[0], "adapter 2": adapters[1], "full 1": full[0]}
    expected = {name: hf_scores(model, prompts, completions) for name, model in models.items()}

    async def scores_of(ctx, teacher):
        client, model = self_scorer(ctx, teacher)
        return [one for one in await client.prompt_logprobs(model, [p + c for p, c in zip(prompts, completions)])]

    async def scenario(url):
        client = InferenceClient(url + "/v1")
        ctx = SimpleNamespace(cfg=cfg, run_dir=run_dir, student=client, student_model=cfg.trainer.lora.name)
        await client.load_lora(cfg.trainer.lora.name, str(run_dir.weights(0)))
        algo = OPSD(MODES["opsd"], SimpleNamespace(teacher=SelfTeacher.lagged, lag=2))
        await algo.lagged(ctx)  # step 0: the lagged teacher is the adapter of weights/step_0
        publish_dir(run_dir.weights(1), lambda tmp: save(adapters[1], tmp))
        await client.load_lora(cfg.trainer.lora.name, str(run_dir.weights(1)))  # the live policy moves on
        await algo.lagged(ctx)  # step 1: not refreshed (lag 2)
        found = {
            "live": await scores_of(ctx, SelfTeacher.live),
            "initial": await scores_of(ctx, SelfTeacher.initial),
            "lagged": await scores_of(ctx, SelfTeacher.lagged),
        }
        full_cfg = compose_config(["training_mode=opsd", "modes.opsd.teacher=lagged", "modes.opsd.lag=2"])
        full_dir = RunDir(tmp_path / "full")
        starting = SimpleNamespace(client=client, model="student")  # the served name of the server of θ0
        ctx = SimpleNamespace(cfg=full_cfg, run_dir=full_dir, teachers={REFERENCE: starting})
        algo = OPSD(MODES["opsd"], SimpleNamespace(teacher=SelfTeacher.lagged, lag=2))
        publish_dir(full_dir.weights(0), lambda tmp: save(full[0], tmp))
        await algo.lagged(ctx)  # step 0: the server of θ0 loads weights/step_0
        publish_dir(full_dir.weights(1), lambda tmp: save(full[1], tmp))
        await algo.lagged(ctx)  # step 1: not refreshed (lag 2)
        found["lagged, full weights"] = await scores_of(ctx, SelfTeacher.lagged)
        await client.close()
        return found

    with serve(student, tmp_path, lora_rank=cfg.trainer.lora.rank) as url:
        found = asyncio.run(scenario(url))
    prompt_len = [len(p) for p in prompts]
    checks = [("live", "adapter 2"), ("initial", "base"), ("lagged", "adapter 1"), ("lagged, full weights", "full 1")]
    for teacher, want in checks:
        for got, exp, n in zip(found[teacher], expected[want], prompt_len):
            assert got[n:] == pytest.approx(exp[n - 1 :], abs=1e-4), teacher  # the completion's tokens
    assert found["initial"][0][-1] != pytest.approx(found["live"][0][-1], abs=1e-3)  # the adapters do move them


def adapter(student, tmp_path, seed: int):
    """peft's LoRA on the student, its B not zero: an adapter that changes the model's scores."""
    torch.manual_seed(seed)
    lora = LoraConfig(r=8, target_modules="all-linear", init_lora_weights=False)
    return get_peft_model(AutoModelForCausalLM.from_pretrained(student), lora)


def moved(student, seed: int):
    """The student with every weight moved a little, as a step of full fine-tuning moves it."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(student)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model


def save(model, path):
    model.save_pretrained(path)


@pytest.mark.vllm
def test_opsd_on_the_model_that_reads_its_context_with_a_lagged_teacher_of_full_weights(tmp_path):
    """model=tiny_reader (a warm start that first learns to give the answer a system message shows) is a far better
    policy shown the answer than without it, which is what opsd distils; its lagged self-teacher, without LoRA,
    is the server of the starting weights reloaded with the policy of every 2nd step, linked out of the pruning."""
    run_dir = tmp_path / "run"
    run = launch(
        run_dir,
        "training_mode=opsd",
        "model=tiny_reader",
        "modes.opsd.teacher=lagged",
        "modes.opsd.lag=2",
        "max_steps=4",
        "orchestrator.eval.interval=4",
        "monitor=off",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    train = [r for r in rows(run_dir) if "loss" in r]
    assert [r["step"] for r in train] == [0, 1, 2, 3] and all(r["time/self_score"] > 0 for r in train)
    assert train[0]["eval/privileged_reward"] > summary(run_dir)["eval/reward_first"] + 0.25, train[0]
    assert (run_dir / "self_teacher" / "model.safetensors").is_file()  # weights/step_2's, linked
    reference = (run_dir / "logs" / f"teacher_inference_{REFERENCE}.log").read_text()
    assert reference.count("POST /collective_rpc") == 2, reference[-2000:]  # steps 0 and 2
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["teacher"] for s in samples} == {"self"}
