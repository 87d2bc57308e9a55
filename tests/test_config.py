"""Composition, validation rules and the dry-run plan (issue: foundation)."""

import itertools
import json
import os
import subprocess

import pytest
from hydra.errors import ConfigCompositionException, HydraException
from omegaconf import OmegaConf

from prime_rl.config import ConfigError, TeacherKind, compose_config, load_config
from prime_rl.config.teachers import DEFAULT, REFERENCE, local_teachers, teacher_names, teacher_view
from prime_rl.launcher.auto_dtype import BF16_MIN_PARAMS, auto_cpu_dtype, cpu_bf16_flag, student_params
from prime_rl.launcher.plan import build_plan
from prime_rl.launcher.preflight import check_at_job, check_at_launch
from prime_rl.launcher.validation import hydra_error
from prime_rl.models.recipe import student_dir, teacher_dir
from tests.conftest import ROOT, launch_cmd

KEY_ENV = "PRIME_RL_TEST_TEACHER_KEY"


@pytest.fixture(autouse=True)
def _teacher_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


def check(overrides, visible_gpus=0):
    check_at_launch(compose_config(overrides), visible_gpus)


@pytest.mark.integration
def test_cfg_job_prints_the_propagated_opd_config():
    out = subprocess.run(
        launch_cmd("--cfg", "job", "training_mode=opd", "teacher=local_vllm"),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    cfg = OmegaConf.create(out)
    assert cfg.training_mode == "opd" and "training_mode" not in cfg.orchestrator  # the mode lives in one place
    assert cfg.trainer.loss.teacher_tau > 0 and cfg.trainer.loss.adv_tau == 1.0
    assert cfg.orchestrator.verification.enabled is True
    assert "num_teacher_gpus" in cfg.deployment
    assert cfg.teacher.kind == "local_vllm"


def test_sft_defaults_to_a_local_teacher():
    cfg = compose_config(["training_mode=sft"])
    assert cfg.training_mode == "sft"
    assert cfg.teacher.kind == TeacherKind.local_vllm


@pytest.mark.parametrize(
    "order", [["training_mode=opd", "teacher=external"], ["teacher=external", "training_mode=opd"]]
)
def test_command_line_teacher_wins_over_the_mode_default(order):
    assert compose_config(order).teacher.kind == TeacherKind.external


@pytest.mark.parametrize("override", ["trainer.loss.teacher_ta=1", "max_steps=many"])
def test_an_unknown_key_or_a_wrong_type_is_an_error_naming_the_key(override):
    with pytest.raises(ConfigCompositionException) as e:
        compose_config([override])
    assert hydra_error(e.value).keys == [override.split("=")[0]]


VALID = {
    ("rl", "none"),
    ("opsd", "none"),
    ("opd", "local_vllm"),
    ("opd", "external"),
    ("sft", "local_vllm"),
    ("sft", "external"),
}


@pytest.mark.parametrize(
    "mode,teacher,lora",
    list(itertools.product(["rl", "opd", "sft", "opsd"], ["none", "local_vllm", "external"], ["on", "off"])),
)
def test_every_mode_teacher_lora_combination(mode, teacher, lora):
    overrides = [f"training_mode={mode}", f"teacher={teacher}", f"lora={lora}"]
    cfg = compose_config(overrides)
    assert cfg.trainer.lora.enabled is (lora == "on")
    assert cfg.training_mode == mode
    if (mode, teacher) in VALID:
        check_at_launch(cfg, 0)
    else:
        with pytest.raises(ConfigError) as err:
            check_at_launch(cfg, 0)
        assert "teacher" in err.value.keys or "training_mode" in err.value.keys, err.value.keys


@pytest.mark.parametrize("name", ["rl", "opd", "opd_lora", "sft", "sft_lora", "sft_external"])
def test_every_experiment_composes_and_validates(name):
    cfg = compose_config([f"experiment={name}"])
    check_at_launch(cfg, 0)
    assert cfg.training_mode == name.split("_")[0]
    assert cfg.trainer.lora.enabled is name.endswith("_lora")
    expected_teacher = {"rl": "none", "sft_external": "external"}.get(name, "local_vllm")
    assert cfg.teacher.kind.value == expected_teacher


RL_BESIDE_OPD = ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:opd}]", "trainer.loss.teacher_tau=1"]
SERVED_REFERENCE = ["trainer.loss.kl_ref_tau=0.05", "trainer.loss.kl_ref_from=vllm"]
# a named teacher called what the served reference is called
TWO_NAMED_REFERENCE = [
    "task=mix",
    "task.mix=[{name:reverse,mode:opd,teacher:reference}]",
    "++teachers={reference:{kind:local_vllm,model:tiny}}",
    "trainer.loss.teacher_tau=1",
]
# (accepted overrides, rejected overrides, a key the error must name)
RULES = {
    "rl forbids a teacher": ([], ["teacher=local_vllm"], "teacher"),
    "rl needs teacher_tau 0": (
        ["trainer.loss.teacher_tau=0"],
        ["trainer.loss.teacher_tau=0.5"],
        "trainer.loss.teacher_tau",
    ),
    "rl needs verification": ([], ["orchestrator.verification.enabled=false"], "orchestrator.verification.enabled"),
    "a served reference needs the reference KL on": (
        [*SERVED_REFERENCE],
        ["trainer.loss.kl_ref_from=vllm"],
        "trainer.loss.kl_ref_tau",
    ),
    "a served reference is for full fine-tuning": ([*SERVED_REFERENCE], [*SERVED_REFERENCE, "lora=on"], "lora"),
    "a served reference scores at temperature 1": (
        [*SERVED_REFERENCE, "orchestrator.sampling.temperature=1.0"],
        [*SERVED_REFERENCE, "orchestrator.sampling.temperature=0.7"],
        "orchestrator.sampling.temperature",
    ),
    "a served reference has its name": (
        [*SERVED_REFERENCE, "training_mode=opd", "teacher=local_vllm"],
        [*SERVED_REFERENCE, *TWO_NAMED_REFERENCE],
        "teachers.reference",
    ),
    "opd needs a teacher": (["training_mode=opd"], ["training_mode=opd", "teacher=none"], "teacher"),
    "opd needs teacher_tau > 0": (
        ["training_mode=opd", "trainer.loss.teacher_tau=0.3"],
        ["training_mode=opd", "trainer.loss.teacher_tau=0"],
        "trainer.loss.teacher_tau",
    ),
    "sft needs a teacher": (["training_mode=sft"], ["training_mode=sft", "teacher=none"], "teacher"),
    "opsd is its own scorer: no teacher": (
        ["training_mode=opsd"],
        ["training_mode=opsd", "teacher=external"],
        "teacher",
    ),
    "the scorer's term's knobs only where a mode scores tokens": (
        ["training_mode=opsd", "trainer.loss.teacher_adv_clip=0"],
        ["trainer.loss.teacher_adv_clip=0"],
        "trainer.loss.teacher_adv_clip",
    ),
    "opsd needs teacher_tau > 0": (
        ["training_mode=opsd", "trainer.loss.teacher_tau=0.3"],
        ["training_mode=opsd", "trainer.loss.teacher_tau=0"],
        "trainer.loss.teacher_tau",
    ),
    "an opsd source of a mix takes a teacher_tau of its own": (
        ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:opsd,teacher_tau:0.5}]"],
        ["task=mix", "task.mix=[{name:reverse,teacher_tau:0.5},{name:sort,mode:opsd}]", "trainer.loss.teacher_tau=1"],
        "task.mix[0].teacher_tau",
    ),
    "opsd's knobs are typed and checked": (
        ["training_mode=opsd", "modes.opsd.context='Answer: {answer}'"],
        ["training_mode=opsd", "modes.opsd.context='Answer: none'"],
        "modes.opsd",
    ),
    "a mode's own knobs only in a run with it": (
        ["training_mode=opsd"],
        ["training_mode=rl", "+modes.opsd.context='{answer}'"],
        "modes.opsd",
    ),
    "a mode by import path that is no Mode": (
        [],
        ["task=mix", "task.mix=[{name:reverse,mode:'prime_rl.config.modes:MODES'}]"],
        "task.mix[0].mode",
    ),
    "a sequence-level ratio weighs the student's samples": (
        ["training_mode=opd", "trainer.loss.ratio_level=sequence"],
        ["training_mode=sft", "trainer.loss.ratio_level=sequence"],
        "trainer.loss.ratio_level",
    ),
    "adv_tau > 0 needs verification": (
        ["training_mode=opd", "trainer.loss.adv_tau=0", "orchestrator.verification.enabled=false"],
        ["training_mode=opd", "orchestrator.verification.enabled=false"],
        "trainer.loss.adv_tau",
    ),
    "external teacher gets no GPUs": (
        ["training_mode=opd", "teacher=external"],
        ["training_mode=opd", "teacher=external", "deployment.num_teacher_gpus=1"],
        "deployment.num_teacher_gpus",
    ),
    "no teacher gets no GPUs": ([], ["deployment.num_teacher_gpus=0"], "deployment.num_teacher_gpus"),
    "external teacher needs an http url": (
        ["training_mode=sft", "teacher=external", "teacher.base_url=http://127.0.0.1:8000/v1"],
        ["training_mode=sft", "teacher=external", "teacher.base_url=127.0.0.1:8000"],
        "teacher.base_url",
    ),
    "external teacher key env must be set": (
        ["training_mode=sft", "teacher=external", "teacher.api_key_env=OPENAI_API_KEY"],
        ["training_mode=sft", "teacher=external", f"teacher.api_key_env={KEY_ENV}"],
        "teacher.api_key_env",
    ),
    "no credentials in headers": (
        ["training_mode=sft", "teacher=external", "+teacher.headers.X-Org=lab"],
        ["training_mode=sft", "teacher=external", "+teacher.headers.Authorization=Bearer x"],
        "teacher.headers.Authorization",
    ),
    "provider fields leave ours alone": (
        ["training_mode=sft", "teacher=external", "+teacher.extra_body.reasoning_effort=low"],
        ["training_mode=sft", "teacher=external", "+teacher.extra_body.max_tokens=5"],
        "teacher.extra_body.max_tokens",
    ),
    "an endpoint without sampling settings samples at 1": (
        ["training_mode=sft", "teacher=external", "teacher.api.sampling_params=false"],
        [
            "training_mode=sft",
            "teacher=external",
            "teacher.api.sampling_params=false",
            "orchestrator.sampling.temperature=0.7",
        ],
        "teacher.api.sampling_params",
    ),
    "no password in the teacher url": (
        ["training_mode=sft", "teacher=external", "teacher.base_url=https://api.example.com/v1"],
        ["training_mode=sft", "teacher=external", "teacher.base_url=https://user:sk-1@api.example.com/v1"],
        "teacher.base_url",
    ),
    "teacher cache dir writable": (
        ["training_mode=sft", "teacher.cache_dir=/tmp/prime-rl-teacher-cache-test/answers"],
        ["training_mode=sft", "teacher.cache_dir=/etc/hostname/answers"],
        "teacher.cache_dir",
    ),
    "teacher concurrency >= 1": (
        ["training_mode=sft", "teacher.max_concurrency=1"],
        ["training_mode=sft", "teacher.max_concurrency=0"],
        "teacher.max_concurrency",
    ),
    "teacher model must be named": (["training_mode=opd"], ["training_mode=opd", "teacher.model=''"], "teacher.model"),
    "batch is whole groups": (
        ["orchestrator.batch_size=64"],
        ["orchestrator.batch_size=100"],
        "orchestrator.batch_size",
    ),
    "GRPO advantages need groups": (
        ["training_mode=opd", "orchestrator.rollouts_per_example=1", "trainer.loss.adv_tau=0"],
        ["training_mode=opd", "orchestrator.rollouts_per_example=1"],
        "orchestrator.rollouts_per_example",
    ),
    "training samples at a temperature": (
        ["orchestrator.sampling.temperature=0.7", "orchestrator.eval.temperature=0"],
        ["orchestrator.sampling.temperature=0"],
        "orchestrator.sampling.temperature",
    ),
    "training samples the whole distribution": (
        ["training_mode=sft", "orchestrator.sampling.top_p=0.9"],
        ["training_mode=opd", "orchestrator.sampling.top_p=0.9"],
        "orchestrator.sampling.top_p",
    ),
    "the weight's mask bounds contain 1": (
        ["trainer.loss.correction.mask_low=0", "trainer.loss.correction.mask_high=1"],
        ["trainer.loss.correction.mask_low=1.5", "trainer.loss.correction.mask_high=2"],
        "trainer.loss.correction.mask_low",
    ),
    "no upper mask bound": (
        ["correction=none"],
        ["trainer.loss.correction.mask_high=0.5"],
        "trainer.loss.correction.mask_high",
    ),
    "the weight is truncated at 1 or above": (
        ["correction=token_tis", "trainer.loss.correction.truncate_at=1"],
        ["correction=token_tis", "trainer.loss.correction.truncate_at=0.5"],
        "trainer.loss.correction.truncate_at",
    ),
    "max_steps >= 1": (["max_steps=1"], ["max_steps=0"], "max_steps"),
    "lr >= 0": (["trainer.optim.lr=0"], ["trainer.optim.lr=-1"], "trainer.optim.lr"),
    "port in range": (["inference.port=8000"], ["inference.port=70000"], "inference.port"),
    "completion fits the context": (
        ["orchestrator.sampling.max_tokens=64"],
        ["orchestrator.sampling.max_tokens=600"],
        "inference.max_model_len",
    ),
    "lora rank >= 1": (["lora=on"], ["lora=on", "trainer.lora.rank=0"], "trainer.lora.rank"),
    "known task": (["task=sort"], ["task.name=nope"], "task.name"),
    "model dir exists": ([], ["model.name=/nonexistent/model"], "model.name"),
    "jsonl needs a readable file": ([], ["task=jsonl", "task.path=/nonexistent.jsonl"], "task.path"),
    "ckpt keeps >= 1": (["ckpt.keep=1"], ["ckpt.keep=0"], "ckpt.keep"),
    "a step's prompts fit the train split": (["task.num_train=16"], ["task.num_train=15"], "task.num_train"),
    "a step's prompts fit each source of a mix": (
        ["task=mix", "task.mix=[{name:sort},{name:reverse,num_train:16}]"],
        ["task=mix", "task.mix=[{name:sort},{name:reverse,num_train:15}]"],
        "task.mix[1].num_train",
    ),
    # a mode per source: what each source's mode needs, under its key
    "a teacher for an opd source of a mix": (
        [*RL_BESIDE_OPD, "teacher=local_vllm"],
        RL_BESIDE_OPD,
        "task.mix[1].mode",
    ),
    "a teacher only where a source's mode takes one": (
        ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:sft}]", "teacher=local_vllm"],
        ["task=mix", "task.mix=[{name:reverse},{name:sort}]", "teacher=local_vllm"],
        "teacher",
    ),
    "an opd source's own teacher_tau stands for the run's": (
        ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:opd,teacher_tau:0.5}]", "teacher=local_vllm"],
        ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:opd,teacher_tau:0}]", "teacher=local_vllm"],
        "task.mix[1].teacher_tau",
    ),
    "an sft source takes no adv_tau": (
        ["task=mix", "task.mix=[{name:reverse,adv_tau:0.5},{name:sort,mode:sft}]", "teacher=local_vllm"],
        ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:sft,adv_tau:0.5}]", "teacher=local_vllm"],
        "task.mix[1].adv_tau",
    ),
    "the difficulty filter needs every source on the student's samples": (
        ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:opd}]", "teacher=local_vllm"]
        + ["trainer.loss.teacher_tau=1", "orchestrator.difficulty.enabled=true"],
        ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:sft}]", "teacher=local_vllm"]
        + ["orchestrator.difficulty.enabled=true"],
        "task.mix[1].mode",
    ),
    "a mix source's own rollouts_per_example >= 1": (
        ["task=mix", "task.mix=[{name:reverse},{name:sort,rollouts_per_example:2}]"],
        ["task=mix", "task.mix=[{name:reverse},{name:sort,rollouts_per_example:0}]"],
        "task.mix[1].rollouts_per_example",
    ),
    "a source whose advantages train samples each prompt twice or more": (
        ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:opd,adv_tau:0,rollouts_per_example:1}]"]
        + ["teacher=local_vllm", "trainer.loss.teacher_tau=1"],
        ["task=mix", "task.mix=[{name:reverse},{name:sort,mode:opd,rollouts_per_example:1}]"]
        + ["teacher=local_vllm", "trainer.loss.teacher_tau=1"],
        "task.mix[1].rollouts_per_example",
    ),
    "the difficulty filter judges groups of two or more": (
        ["orchestrator.difficulty.enabled=true", "orchestrator.rollouts_per_example=2", "orchestrator.batch_size=32"],
        ["orchestrator.difficulty.enabled=true", "orchestrator.rollouts_per_example=1"],
        "orchestrator.rollouts_per_example",
    ),
    "rollouts_per_example per source only in a mix": ([], ["task.rollouts_per_example=2"], "task.rollouts_per_example"),
    "trainer procs >= 1": (["trainer.num_procs=2"], ["trainer.num_procs=0"], "trainer.num_procs"),
    "lora trains in one process": (["lora=on"], ["lora=on", "trainer.num_procs=2"], "trainer.lora.enabled"),
    "cpu inference has no tp": (["inference.tp=1"], ["inference.tp=2"], "inference.tp"),
    "cpu inference has no dp": (["inference.dp=1"], ["inference.dp=2"], "inference.dp"),
}


@pytest.mark.parametrize("key", ["orchestrator.training_mode=opd", "trainer.loss.type=sft"])
def test_the_mode_is_set_only_at_the_top_level(key):
    """The trainer and orchestrator read training_mode itself: no second copy can disagree with it."""
    with pytest.raises(HydraException) as e:
        compose_config([key])
    assert hydra_error(e.value).keys == [key.split("=")[0]]


@pytest.mark.parametrize("rule", list(RULES))
def test_rule_accepts_and_rejects(rule, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    accepted, rejected, key = RULES[rule]
    check(accepted)
    with pytest.raises(ConfigError) as err:
        check(rejected)
    assert key in err.value.keys and err.value.fix
    assert "\n" not in str(err.value)


def test_a_served_reference_is_one_more_local_server_of_the_students_starting_model(tmp_path):
    """trainer.loss.kl_ref_from=vllm: a server of its own, serving the student's build (which it never rebuilds),
    beside a run's own teachers; its view trains on nothing."""
    cfg = compose_config([*SERVED_REFERENCE, "training_mode=opd", "teacher=local_vllm"])
    assert teacher_names(cfg) == [DEFAULT, REFERENCE] and local_teachers(cfg) == [DEFAULT, REFERENCE]
    assert teacher_dir(teacher_view(cfg, REFERENCE)) == student_dir(cfg) != teacher_dir(cfg)
    plan = build_plan(cfg, tmp_path, [])
    assert [r.name for r in plan.roles if "inference" in r.name] == [
        "inference", "teacher_inference", "teacher_inference_reference"
    ]  # fmt: skip
    assert teacher_names(compose_config(["trainer.loss.kl_ref_tau=0.05"])) == []  # the trainer's copy: no server


# the default local teacher teaches reverse, a named local one sort
TWO_LOCAL_TEACHERS = [
    "task=mix",
    "task.mix=[{name:reverse,mode:opd},{name:sort,mode:opd,teacher:srt}]",
    "teacher=local_vllm",
    "++teachers={srt:{kind:local_vllm,model:tiny}}",
    "trainer.loss.teacher_tau=1",
]


def test_gpu_rules_against_visible_devices():
    two = ["deployment.num_infer_gpus=1", "deployment.num_train_gpus=1"]
    check(two, visible_gpus=2)
    with pytest.raises(ConfigError) as err:
        check(two, visible_gpus=1)
    assert err.value.keys == ["deployment.num_infer_gpus", "deployment.num_train_gpus"]
    opd_gpu = ["training_mode=opd", *two]
    check([*opd_gpu, "deployment.num_teacher_gpus=1"], visible_gpus=3)
    with pytest.raises(ConfigError) as err:
        check(opd_gpu, visible_gpus=3)
    assert err.value.keys == ["deployment.num_teacher_gpus"]
    # several local teachers: num_teacher_gpus split evenly between their servers
    teachers_gpu = [*TWO_LOCAL_TEACHERS, *two]
    check([*teachers_gpu, "deployment.num_teacher_gpus=4"], visible_gpus=6)
    for uneven_or_none in (["deployment.num_teacher_gpus=3"], []):
        with pytest.raises(ConfigError) as err:
            check([*teachers_gpu, *uneven_or_none], visible_gpus=6)
        assert err.value.keys == ["deployment.num_teacher_gpus"] and "(teacher, teachers.srt)" in err.value.problem
    named_only = [*teachers_gpu, "teacher=external", "teacher.base_url=http://h/v1", "teacher.model=m"]
    check([*named_only, "deployment.num_teacher_gpus=1"], visible_gpus=3)  # the GPU is the named local one's


def test_each_local_teacher_gets_a_server_on_its_share_of_the_teacher_gpus(tmp_path):
    """Separate GPUs: student, trainer, then `num_teacher_gpus` split between the local teachers, each server
    spread over its own slice. Colocated on one GPU: each teacher server holds its own share of it."""
    from prime_rl.config.layout import gpu_shares

    gpu = ["deployment.num_infer_gpus=1", "deployment.num_train_gpus=1", "deployment.num_teacher_gpus=4"]
    plan = build_plan(compose_config([*TWO_LOCAL_TEACHERS, *gpu]), tmp_path, [str(i) for i in range(6)])
    assert {r.name: r.gpus for r in plan.roles} == {
        "inference": ["0"],
        "teacher_inference": ["2", "3"],
        "teacher_inference_srt": ["4", "5"],
        "orchestrator": [],
        "trainer": ["1"],
    }
    for role, devices in (("teacher_inference", "2,3"), ("teacher_inference_srt", "4,5")):
        server = plan.role(role)
        assert server.env["CUDA_VISIBLE_DEVICES"] == devices
        assert server.command[server.command.index("--tensor-parallel-size") + 1] == "2"
    colocated = compose_config(
        [*TWO_LOCAL_TEACHERS, "deployment=colocated_gpu", "++teachers.srt.gpu_memory_utilization=0.1"]
    )
    shares = gpu_shares(colocated)
    assert list(shares) == [f"{key}.gpu_memory_utilization" for key in ("inference", "teacher", "teachers.srt")]
    assert shares["teachers.srt.gpu_memory_utilization"] == 0.1
    shared = build_plan(colocated, tmp_path, ["0"])
    assert [shared.role(r).gpus for r in ("inference", "teacher_inference", "teacher_inference_srt")] == [["0"]] * 3


def test_a_job_runs_only_the_job_time_checks(tmp_path, monkeypatch):
    """The launch checked everything else once; the job checks what can differ where it runs: its GPUs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv(KEY_ENV, raising=False)
    external = ["training_mode=sft", "teacher=external", f"teacher.api_key_env={KEY_ENV}", "launcher.dry_run=true"]
    cfg = compose_config([*external, "monitor=off"])
    assert check_at_job(cfg, tmp_path, print) == cfg  # the unset key env var was the launch's to refuse
    two = compose_config(["deployment.num_infer_gpus=1", "deployment.num_train_gpus=1", "monitor=off"])
    with pytest.raises(ConfigError) as err:
        check_at_job(two, tmp_path, print)
    assert err.value.keys == ["deployment.num_infer_gpus", "deployment.num_train_gpus"]


def test_local_model_dir_and_jsonl_task_are_accepted(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"w{i}", "answer": f"{i}w"}) + "\n" for i in range(20)))
    check([f"model.name={tmp_path}", "task=jsonl", f"task.path={data}", "task.num_eval=4"])  # 16 train rows
    with pytest.raises(ConfigError) as err:
        check([f"model.name={tmp_path}", "task=jsonl", f"task.path={data}", "task.num_eval=5"])
    assert err.value.keys == ["task.path", "orchestrator.batch_size"]


@pytest.mark.integration
def test_rejected_launch_exits_2_and_starts_nothing(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        launch_cmd("training_mode=opd", "trainer.loss.teacher_tau=0", f"hydra.run.dir={run_dir}"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and "trainer.loss.teacher_tau" in lines[0] and "fix:" in lines[0]
    assert not (run_dir / "configs").exists() and not (run_dir / "logs").exists()


@pytest.mark.integration
def test_opd_dry_run_plan(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        launch_cmd("training_mode=opd", "teacher=local_vllm", "launcher.dry_run=true", f"hydra.run.dir={run_dir}"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((run_dir / "configs" / "plan.json").read_text())
    assert plan["modes"] == ["opd"] and plan["weights"] == "files"
    assert plan["layout"] == "colocated" and [t["holder"] for t in plan["turns"]] == ["orchestrator", "trainer"]
    roles = {role["name"]: role for role in plan["roles"]}
    assert set(roles) == {"inference", "teacher_inference", "orchestrator", "trainer"}
    for role in roles.values():
        cfg = load_config(role["config"])
        assert cfg.run_dir == str(run_dir.resolve())
    # no port is chosen before a server binds it: each binds one of the kernel's choosing
    assert cfg.inference.port == cfg.teacher.port == 0
    for server in ("inference", "teacher_inference"):
        command = roles[server]["command"]
        assert roles[server]["port"] == 0 and command[command.index("--port") + 1] == "0"
    assert not (run_dir / "logs").exists()  # nothing was started
    # dtype=auto on a CPU: float32 for the tiny student on any CPU; the plan says which it chose and why, and every
    # role reads the choice (the servers' --dtype, the trainer's compute dtype)
    assert plan["dtype"]["trainer"] == plan["dtype"]["inference"] == cfg.trainer.dtype == "float32"
    assert plan["dtype"]["auto"].startswith("inference and trainer dtype auto: float32 (")
    command = roles["inference"]["command"]
    assert command[command.index("--dtype") + 1] == "float32"


def test_dtype_auto_picks_bf16_only_on_a_cpu_that_computes_it_and_a_student_it_pays_for(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu_bf16_flag(cpuinfo) == "avx512_bf16"
    cpuinfo.write_text("flags\t\t: fpu avx2 amx_tile amx_bf16\n")
    assert cpu_bf16_flag(cpuinfo) == "amx_bf16"
    cpuinfo.write_text("flags\t\t: fpu avx2 avx512f\n")
    assert cpu_bf16_flag(cpuinfo) is None and cpu_bf16_flag(tmp_path / "absent") is None
    assert auto_cpu_dtype(None, 10**9)[0] == "float32"
    assert auto_cpu_dtype("avx512_bf16", None)[0] == "float32"  # a dry run before the student is built
    assert auto_cpu_dtype("avx512_bf16", BF16_MIN_PARAMS - 1)[0] == "float32"
    assert auto_cpu_dtype("amx_bf16", BF16_MIN_PARAMS)[0] == "bfloat16"
    unreadable = tmp_path / "model"  # an architecture transformers lacks: its size is unknown, not an exception
    unreadable.mkdir()
    (unreadable / "config.json").write_text('{"model_type": "no_such_architecture"}')
    assert student_params(compose_config([f"model.name={unreadable}"])) is None


def test_gpu_slices_are_disjoint_and_ordered(tmp_path):
    cfg = compose_config(
        [
            "training_mode=opd",
            "deployment.num_infer_gpus=1",
            "deployment.num_train_gpus=2",
            "deployment.num_teacher_gpus=1",
        ]
    )
    check_at_launch(cfg, 4)
    plan = build_plan(cfg, tmp_path, ["0", "1", "2", "3"])
    slices = {r.name: r.gpus for r in plan.roles}
    assert slices == {"inference": ["0"], "trainer": ["1", "2"], "teacher_inference": ["3"], "orchestrator": []}
    assert plan.role("inference").env["CUDA_VISIBLE_DEVICES"] == "0"
    assert plan.role("trainer").env["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert "--tensor-parallel-size" in plan.role("inference").command


@pytest.mark.integration
def test_gpu_slices_follow_cuda_visible_devices(tmp_path):
    run_dir = tmp_path / "run"
    env_overrides = ["deployment.num_infer_gpus=1", "deployment.num_train_gpus=1"]
    proc = subprocess.run(
        launch_cmd(*env_overrides, "launcher.dry_run=true", f"hydra.run.dir={run_dir}"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": "5,7", "COLUMNS": "400"},
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((run_dir / "configs" / "plan.json").read_text())
    devices = {role["name"]: role["gpus"] for role in plan["roles"]}
    assert devices == {"inference": ["5"], "trainer": ["7"], "orchestrator": []}


def test_parallelism_rules_on_gpus():
    gpus = ["deployment.num_infer_gpus=4", "deployment.num_train_gpus=2"]
    check([*gpus, "inference.tp=2", "inference.dp=2"], visible_gpus=6)
    check([*gpus, "inference.tp=4", "trainer.num_procs=2"], visible_gpus=6)  # num_procs may repeat the GPU count
    with pytest.raises(ConfigError) as err:
        check([*gpus, "inference.tp=2"], visible_gpus=6)  # 2 x 1 != 4
    assert err.value.keys == ["inference.tp", "inference.dp", "deployment.num_infer_gpus"]
    with pytest.raises(ConfigError) as err:
        check([*gpus, "inference.tp=4", "trainer.num_procs=3"], visible_gpus=6)
    assert err.value.keys == ["trainer.num_procs", "deployment.num_train_gpus"]
    with pytest.raises(ConfigError) as err:
        check([*gpus, "inference.tp=4", "lora=on"], visible_gpus=6)
    assert err.value.keys == ["trainer.lora.enabled", "deployment.num_train_gpus"]


def dry_run(tmp_path, *overrides, cuda_visible=None) -> list[dict]:
    """The plans `launch.py launcher.dry_run=true <overrides>` writes (configs/plan*.json: one per node)."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if cuda_visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        launch_cmd(*overrides, "launcher.dry_run=true", f"hydra.run.dir={run_dir}"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(path.read_text()) for path in sorted((run_dir / "configs").glob("plan*.json"))]


def role_of(plans: list[dict], name: str) -> dict:
    return next(role for plan in plans for role in plan["roles"] if role["name"] == name)


def command_of(plans: list[dict], name: str) -> list[str]:
    return role_of(plans, name)["command"]


@pytest.mark.integration
def test_dry_run_trainer_on_two_cpu_processes_is_torchrun(tmp_path):
    trainer = command_of(dry_run(tmp_path, "trainer.num_procs=2"), "trainer")
    assert trainer[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    assert trainer[6:9] == ["-m", "prime_rl.trainer", "--config"]


@pytest.mark.integration
def test_dry_run_gpu_deployment_with_tp_dp_and_a_sharded_trainer(tmp_path):
    plans = dry_run(
        tmp_path,
        "deployment=gpu",
        "deployment.num_infer_gpus=4",
        "deployment.num_train_gpus=2",
        "inference.tp=2",
        "inference.dp=2",
        cuda_visible="3,4,5,6,7,9",
    )
    vllm = command_of(plans, "inference")
    flag = lambda name: vllm[vllm.index(name) + 1]  # noqa: E731
    assert flag("--tensor-parallel-size") == "2" and flag("--data-parallel-size") == "2"
    assert role_of(plans, "inference")["env"]["CUDA_VISIBLE_DEVICES"] == "3,4,5,6"
    assert role_of(plans, "trainer")["env"]["CUDA_VISIBLE_DEVICES"] == "7,9"
    trainer = command_of(plans, "trainer")
    assert trainer[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def test_each_named_teacher_sees_the_run_as_its_own_sources_and_gets_a_server(tmp_path):
    """teachers.<name>: a view of the run with that teacher as `teacher` and its own sources as the task (a built-in
    teacher is built on them alone), a server role of its own, and checks that name it."""
    from prime_rl.config.teachers import local_teachers, named_errors, teacher_view
    from prime_rl.models import teacher_dir

    overrides = [
        "task=mix",
        "task.mix=[{name:reverse,mode:opd,teacher:rev},{name:sort,mode:opd,teacher:srt},{name:reverse,label:r2}]",
        "++teachers={rev:{kind:local_vllm,model:tiny},srt:{kind:external,model:m,base_url:'http://h/v1'}}",
        "trainer.loss.teacher_tau=1",
    ]
    cfg = compose_config(overrides)
    rev, srt = teacher_view(cfg, "rev"), teacher_view(cfg, "srt")
    assert (rev.teacher.kind, srt.teacher.model) == (TeacherKind.local_vllm, "m")
    assert [s.name for s in rev.task.mix] == ["reverse"] and [s.name for s in srt.task.mix] == ["sort"]
    assert teacher_dir(rev) != teacher_dir(compose_config(["training_mode=opd"]))  # built on reverse alone
    assert local_teachers(cfg) == ["rev"]  # the external one has no server
    roles = [r.name for r in build_plan(cfg, tmp_path, []).roles]
    assert roles == ["inference", "teacher_inference_rev", "orchestrator", "trainer"]
    with pytest.raises(ConfigError) as err, named_errors("rev"):
        check(["training_mode=opd", "teacher=external", "teacher.model=m", "teacher.base_url=nope"])
    assert err.value.keys == ["teachers.rev.base_url"] and "teachers.rev.base_url=" in err.value.fix
