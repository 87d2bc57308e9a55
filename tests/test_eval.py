"""`python -m prime_rl.eval` for real: a short rl run and a short LoRA run on real vLLM, their models evaluated by the
command (its own server, and a standing one), checked against the runs' own greedy evaluations of the same weights;
the checkpoint export against the trainer's own export; the models a command names, found or refused in one line."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from prime_rl.config import compose_config
from prime_rl.config.user_error import UserError
from prime_rl.eval.__main__ import evaluate as evaluate_command
from prime_rl.eval.__main__ import parse_args
from prime_rl.eval.configs import run_overrides
from prime_rl.eval.harness import check_harness
from prime_rl.eval.points import check_points, find_points, launcher_overrides, slurm_params
from prime_rl.eval.run import Request, check_request
from prime_rl.eval.subjects import Subject, find_subjects
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.plan import build_plan
from prime_rl.models.chat import chat_tokenizer
from prime_rl.protocol.run_dir import RunDir
from prime_rl.tasks import load_task
from tests.conftest import ROOT
from tests.run_dir_layouts import run_dir_with, sweep_dir_of, write_overrides
from tests.test_e2e_rl import launch, rows, run_processes
from tests.test_monitor import offline_runs
from tests.test_slurm import job_ids, needs_slurm, sacct

# every run evaluates greedily on 32 prompts at steps 0, 2 and 4 on the policy of that step (max_async_level=0), and
# checkpoints at 2 and 4: weights/ keeps the last two exports (3, 4), so step 2 is only a checkpoint
RUN = [
    "max_steps=4",
    "ckpt.interval=2",
    "orchestrator.eval.interval=2",
    "orchestrator.eval.temperature=0",
    "orchestrator.eval.num_examples=32",
    "orchestrator.max_async_level=0",
]
# and the rl run evaluates one more task during training, every 4 steps: 16 prompts of sort, 2 samples each at T = 1
EVAL_TASKS = "orchestrator.eval.tasks=[{name:sort,interval:4,num_examples:16,samples_per_prompt:2,temperature:1}]"
LORA = ["lora=on", "trainer.optim.lr=1e-2", "trainer.optim.warmup_steps=0"]  # an adapter that surely moves the eval


def evaluate(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "prime_rl.eval", *args], capture_output=True, text=True, cwd=ROOT, timeout=600, env=env
    )


def results(proc: subprocess.CompletedProcess) -> list[dict]:
    path = Path(proc.stdout.rsplit("results: ", 1)[1].split()[0])
    return json.loads(path.read_text())["results"]


def evals_of(run_dir: Path) -> dict[int, float]:
    """The run's own eval reward by step (the final line's step is max_steps)."""
    return {r["step"]: r["eval/reward"] for r in rows(run_dir) if "eval/reward" in r}


@pytest.fixture(scope="module")
def rl_run(shared_dir, standing_servers) -> Path:
    """Built once for both workers: the SLURM group's test of it runs in the other (tests/conftest.py SHARED_RUNS).
    The evaluations only read it."""
    run_dir = shared_dir / "eval-rl"
    with FileLock(shared_dir / "eval-rl.lock"):
        if not (run_dir / "summary.json").exists():
            offline = "monitor.wandb.mode=offline"  # an evaluation logs to W&B as its run did, and a test reads it back
            proc = launch(run_dir, *RUN, EVAL_TASKS, offline, standing=standing_servers)
            assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, standing_servers) -> Path:
    run_dir = tmp_path_factory.mktemp("eval") / "lora"
    proc = launch(run_dir, *RUN, *LORA, standing=standing_servers)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.mark.vllm
def test_an_eval_task_during_training_is_evaluated_at_its_own_interval_with_its_own_k(rl_run):
    evaluated = {r["step"]: r for r in rows(rl_run) if "eval/reward" in r or "eval/sort/reward" in r}
    assert sorted(evaluated) == [0, 2, 4]
    assert [s for s, r in evaluated.items() if "eval/sort/reward" in r] == [0, 4]  # every 4 steps, not every 2
    for step in (0, 4):
        r = evaluated[step]
        assert r["eval/sort/pass@1"] <= r["eval/sort/pass@2"] and "eval/sort/pass@4" not in r  # its own k: 2
        assert r["eval/sort/reward"] != r["eval/reward"] and 0 < r["eval/sort/completion_tokens"] <= 16
    summary = json.loads((rl_run / "summary.json").read_text())
    assert summary["eval/sort/reward_final"] == evaluated[4]["eval/sort/reward"]


@pytest.mark.vllm
def test_a_runs_models_on_two_tasks_with_pass_at_k_on_its_own_server(rl_run, tmp_path):
    out = tmp_path / "out"
    proc = evaluate(
        "--run", str(rl_run), "--step", "start,latest", "--task", "reverse,sort", "--out", str(out),
        "orchestrator.eval.temperature=1", "orchestrator.eval.samples_per_prompt=4",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = results(proc)
    assert [(r["model"], r["step"], r["task"]) for r in found] == [
        ("start", 0, "reverse"), ("start", 0, "sort"), ("step_4", 4, "reverse"), ("step_4", 4, "sort"),
    ]  # fmt: skip
    for r in found:
        assert r["eval/avg@4"] == r["eval/reward"] and 0 < r["eval/completion_tokens"] <= 16
        assert r["eval/pass@1"] <= r["eval/pass@2"] <= r["eval/pass@4"]
    assert any(r["eval/pass@4"] > r["eval/pass@1"] for r in found)  # four samples at T = 1 find what one misses
    assert (out / "logs" / "inference.log").exists()  # its own server, from the launcher's plan
    [logged] = offline_runs(out)  # W&B (offline here, as the run logged): one eval run, every metric of every row
    assert logged.run.job_type == "eval" and logged.config["request"]["steps"] == ["start", "latest"]
    assert all(logged.history[0][f"{r['model']}/{r['task']}/eval/pass@4"] == r["eval/pass@4"] for r in found)
    assert not run_processes(str(out)), "the evaluation's server outlived it"


def harness_task(root: Path) -> Path:
    """A dir with one lm-eval task of our own: the reverse task's first 32 eval prompts, exact match, greedy."""
    root.mkdir()
    data = root / "reverse.jsonl"
    examples = load_task(compose_config([]).task).eval[:32]
    rows = [{"prompt": e.messages[-1]["content"], "answer": e.answer} for e in examples]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = {
        "task": "reverse_words",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "{{answer}}",
        "generation_kwargs": {"until": [], "max_gen_toks": 16, "temperature": 0},
        "metric_list": [{"metric": "exact_match"}],
    }
    (root / "reverse_words.yaml").write_text(json.dumps(spec))  # JSON is YAML
    return root


@pytest.mark.vllm
def test_a_lora_runs_checkpoint_adapter_and_merged_model_score_as_the_run_scored_them(
    lora_run, standing_servers, tmp_path
):
    pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (the harness extra)")
    # on a standing server of the run's recipe: the evaluation loads its starting weights first
    attach = standing_servers.overrides(*RUN, *LORA)
    harness = ["--harness", "reverse_words", "--harness-include", str(harness_task(tmp_path / "tasks"))]
    steps = ["--step", "start,2,latest,merged"]
    proc = evaluate("--run", str(lora_run), *steps, *harness, *attach, env=standing_servers.env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = results(proc)
    ours = {r["model"]: r for r in found if r["task"] == "reverse"}
    own = evals_of(lora_run)
    assert own[4] != own[0]  # the adapter changed what the model answers: the comparisons below can tell
    assert ours["start"]["eval/reward"] == own[0]
    assert ours["step_2"]["eval/reward"] == own[2]  # from checkpoints/step_2: weights/step_2 was pruned in the run
    assert ours["step_4"]["eval/reward"] == own[4]  # the adapter in weights/step_4
    assert ours["merged"]["eval/reward"] == pytest.approx(own[4], abs=1 / 32)  # folded in: a rounding may flip one
    # lm-eval asked the same served models the same 32 prompts through the chat API: the same exact answers
    theirs = {r["model"]: r for r in found if r["task"] == "lm-eval/reverse_words"}
    assert theirs.keys() == ours.keys()
    for model, r in theirs.items():
        assert r["lm-eval/exact_match"] == ours[model]["eval/exact"], model


@pytest.mark.vllm
def test_a_runs_local_teacher_is_served_and_scored_in_the_students_place(tmp_path):
    from prime_rl.models import teacher_dir
    from prime_rl.prepare.greedy_eval import eval_reward

    opd = ["training_mode=opd", "teacher=local_vllm", "orchestrator.eval.temperature=0"]
    proc = evaluate("--teacher", "--out", str(tmp_path / "out"), *opd, "orchestrator.eval.num_examples=32")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = results(proc)
    assert row["model"] == "teacher"
    # transformers' greedy decoding of the teacher's own weights on the same prompts: the same answers
    cfg = compose_config(opd)
    model = AutoModelForCausalLM.from_pretrained(teacher_dir(cfg), dtype=torch.float32)
    assert row["eval/reward"] == pytest.approx(
        eval_reward(model, chat_tokenizer(teacher_dir(cfg), {}), load_task(cfg.task), num=32)
    )


@pytest.mark.vllm
def test_a_checkpoint_exports_the_weights_the_trainer_exported(rl_run, tmp_path):
    from prime_rl.eval.checkpoint_export import export_checkpoint

    torch.set_num_threads(1)
    cfg = replace(compose_config(run_overrides(rl_run)), run_dir=str(tmp_path))
    export_checkpoint(cfg, RunDir(rl_run).checkpoint(4), 4, RunDir(tmp_path))
    trained = load_file(RunDir(rl_run).weights(4) / "model.safetensors")
    exported = load_file(RunDir(tmp_path).weights(4) / "model.safetensors")
    assert trained.keys() == exported.keys()
    assert all(torch.equal(trained[k], exported[k]) for k in trained)


@pytest.mark.vllm
def test_a_step_the_run_does_not_hold_is_one_line_before_any_server_starts(rl_run, tmp_path):
    proc = evaluate("--run", str(rl_run), "--step", "latest,9", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "--step" in line and "start, 2, 3, 4" in line  # what it holds: exports 3, 4 and checkpoints 2, 4
    assert not (tmp_path / "out").exists()


def test_subjects_are_exports_first_then_checkpoints_and_latest_is_the_newest_of_either(tmp_path):
    run = run_dir_with(tmp_path / "run", exports=[5], checkpoints=[2, 6], markers_only=[7])
    out = RunDir(tmp_path / "out")
    found = find_subjects(run, ["start", "5", "2", "latest"], "tiny", out, False)
    assert found == [
        Subject("start", 0, None),
        Subject("step_5", 5, RunDir(run).weights(5)),
        Subject("step_2", 2, out.weights(2), RunDir(run).checkpoint(2)),
        Subject("step_6", 6, out.weights(6), RunDir(run).checkpoint(6)),  # 7 was pushed: nothing to serve
    ]
    assert find_subjects(run, [], "tiny", out, False)[0].step == 6  # latest by default
    assert find_subjects(None, [], "org/model", out, False) == [Subject("org/model", None, None)]
    assert find_subjects(run, [], "tiny", out, True) == [Subject("teacher", None, None)]


@pytest.mark.parametrize(
    ("steps", "run", "keys"),
    [
        (["8"], True, ["--step"]),
        (["merged"], True, ["--step"]),
        (["two"], True, ["--step"]),
        (["3"], False, ["--step", "--run"]),
    ],
)
def test_a_model_the_run_does_not_hold_is_refused_naming_what_it_holds(tmp_path, steps, run, keys):
    root = run_dir_with(tmp_path / "run", exports=[3], checkpoints=[2])
    with pytest.raises(UserError) as e:
        find_subjects(root if run else None, steps, "tiny", RunDir(tmp_path / "out"), False)
    assert e.value.keys == keys and (not run or "start, 2, 3" in str(e.value))  # the steps it holds, to pick from


def test_a_task_judged_by_a_model_is_refused_since_only_the_students_server_is_served():
    judge = "++teachers={judge:{kind:external,model:m,base_url:'http://127.0.0.1:9/v1',api_key_env:null}}"
    with pytest.raises(UserError) as e:
        check_request(Request(None, [], [], ["task.verifier=judge", judge, "judge.teacher=judge"], None))
    assert e.value.keys == ["task.verifier"]


def test_a_dir_no_launch_wrote_is_refused(tmp_path):
    with pytest.raises(UserError) as e:
        run_overrides(tmp_path)
    assert e.value.keys == ["--run"]
    write_overrides(tmp_path, ["max_steps=4", "lora=on", "inference.url=http://h:1/v1"])
    assert run_overrides(tmp_path) == ["max_steps=4", "lora=on"]  # the standing server that launch used: not kept


def test_an_lm_eval_task_it_does_not_know_is_refused_in_one_line(tmp_path):
    pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (the harness extra)")
    tasks = harness_task(tmp_path / "tasks")
    check_harness(["reverse_words"], tasks)
    with pytest.raises(UserError) as unknown:
        check_harness(["reverse_word"], tasks)
    with pytest.raises(UserError) as no_dir:
        check_harness(["reverse_words"], tmp_path / "nowhere")
    assert (unknown.value.keys, no_dir.value.keys) == (["--harness"], ["--harness-include"])


# a sweep of the overrides (-m): the same key twice counts once, as in Hydra (k = 2 and k = 4 at T = 1, on 8 prompts)
SWEEP = [
    "-m",
    "orchestrator.eval.samples_per_prompt=1,2",
    "orchestrator.eval.samples_per_prompt=2,4",
    "orchestrator.eval.temperature=1",
    "orchestrator.eval.num_examples=8",
]


def joined(out: Path) -> tuple[list[dict], list[list[dict]]]:
    """The joined rows of a sweep of evaluations, and each point's own rows (from its own dir)."""
    points = sorted((p for p in out.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return json.loads((out / "results.json").read_text())["results"], [
        json.loads((p / "results.json").read_text())["results"] for p in points
    ]


def assert_one_row_per_point(rows: list[dict], own: list[list[dict]]) -> None:
    """Two points, k = 2 and k = 4, each labelled with its k, whose rows are its own dir's rows."""
    assert [r["point"] for r in rows] == [
        "orchestrator.eval.samples_per_prompt=2",
        "orchestrator.eval.samples_per_prompt=4",
    ]
    assert [max(int(k.rsplit("@", 1)[1]) for k in r if k.startswith("eval/pass@")) for r in rows] == [2, 4]
    assert [{k: v for k, v in r.items() if k not in ("point", "run")} for r in rows] == [o for [o] in own]


@pytest.mark.vllm
def test_a_sweep_of_the_overrides_is_an_evaluation_per_point_joined_in_one_table(rl_run, standing_servers, tmp_path):
    attach = standing_servers.overrides(*RUN, EVAL_TASKS)
    out = tmp_path / "out"
    proc = evaluate("--run", str(rl_run), "--out", str(out), *SWEEP, *attach, env=standing_servers.env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows, own = joined(out)
    assert_one_row_per_point(rows, own)
    assert results(proc) == rows  # the last results it names: the joined ones


@needs_slurm
@pytest.mark.slurm
@pytest.mark.timeout(420)
def test_a_sweep_of_evaluations_on_slurm_is_one_array_job_joined_in_one_table(rl_run, standing_servers, tmp_path):
    attach = standing_servers.overrides(*RUN, EVAL_TASKS)
    out = tmp_path / "out"
    args = ["--run", str(rl_run), "--out", str(out), *SWEEP, "hydra/launcher=slurm", *attach]
    try:
        proc = evaluate(*args, env=standing_servers.env())
    except subprocess.TimeoutExpired:
        for job_id in job_ids(out):  # what it left queued or running
            subprocess.run(["scancel", job_id], check=False)
        raise
    assert proc.returncode == 0, proc.stderr[-3000:]
    [array] = job_ids(out)  # one array job, a task per point
    assert sorted(sacct(array, tasks=2).values()) == [["COMPLETED"], ["COMPLETED"]]
    rows, own = joined(out)
    assert_one_row_per_point(rows, own)


def test_a_sweeps_dir_and_a_sweep_of_overrides_are_its_jobs_times_the_points_each_labelled(tmp_path):
    sweep = sweep_dir_of(tmp_path / "sweep", [0.1, 0.5])
    overrides, launcher = launcher_overrides(SWEEP[1:] + ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"])
    assert launcher == ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"]
    points, root = find_points(Request(None, ["start"], [], overrides, tmp_path / "out"), [sweep], True)
    assert root == tmp_path / "out"
    assert [(p.request.run, p.request.out, p.label) for p in points] == [
        (sweep / "0", root / "0", "trainer.loss.teacher_tau=0.1 orchestrator.eval.samples_per_prompt=2"),
        (sweep / "0", root / "1", "trainer.loss.teacher_tau=0.1 orchestrator.eval.samples_per_prompt=4"),
        (sweep / "1", root / "2", "trainer.loss.teacher_tau=0.5 orchestrator.eval.samples_per_prompt=2"),
        (sweep / "1", root / "3", "trainer.loss.teacher_tau=0.5 orchestrator.eval.samples_per_prompt=4"),
    ]
    [single], none = find_points(Request(None, [], [], [], tmp_path / "one"), [sweep / "1"], False)
    assert none is None and single.label == "" and single.request.out == tmp_path / "one"


def test_an_eval_on_slurm_asks_for_its_one_servers_gpus_on_one_node(tmp_path):
    gpus = ["deployment.num_infer_gpus=2", "deployment.num_train_gpus=4", "deployment.num_teacher_gpus=2"]
    [point], _ = find_points(Request(None, [], [], gpus, tmp_path), [], False)
    params = slurm_params(point, ["hydra/launcher=slurm_gpu", "hydra.launcher.partition=gpu"], tmp_path)
    assert (params["gpus_per_node"], params["nodes"], params["cpus_per_task"]) == (2, 1, 16)  # not the 8 of the run
    assert params["partition"] == "gpu" and params["submitit_folder"] == f"{tmp_path}/%j"
    with pytest.raises(UserError) as basic:
        slurm_params(point, ["hydra/launcher=basic"], tmp_path)
    with pytest.raises(UserError) as misspelt:
        slurm_params(point, ["hydra/launcher=slurm", "hydra.launcher.partiton=gpu"], tmp_path)
    assert (basic.value.keys, misspelt.value.keys) == (["hydra/launcher"], ["hydra.launcher.partiton"])


def test_a_point_that_fails_its_checks_is_named_before_any_is_evaluated(tmp_path):
    sweep = sweep_dir_of(tmp_path / "sweep", [0.1])
    greedy = ["orchestrator.eval.temperature=0", "orchestrator.eval.samples_per_prompt=1,2"]
    points, _ = find_points(Request(None, ["start"], [], greedy, tmp_path / "out"), [sweep], True)
    with pytest.raises(
        UserError, match=r"^eval #1 \(orchestrator.eval.samples_per_prompt=2\): .*nothing was evaluated$"
    ):
        check_points(points)
    assert not (tmp_path / "out").exists()


# a sweep of GPU runs: each run's student served on 2 GPUs (tp = 2), its trainer on 4, its teacher on 2
GPU_RUN = [
    "deployment.num_infer_gpus=2",
    "inference.tp=2",
    "deployment.num_train_gpus=4",
    "deployment.num_teacher_gpus=2",
]


def dry_run(capsys, *args: str) -> str:
    evaluate_command(parse_args([*args, "--dry-run"]))
    return capsys.readouterr().out


def test_an_eval_of_gpu_runs_needs_only_their_students_gpus_and_a_dry_run_shows_each_point(
    tmp_path, monkeypatch, capsys
):
    sweep = sweep_dir_of(tmp_path / "sweep", [0.1, 0.5], exports=[3, 6], overrides=GPU_RUN)
    out = tmp_path / "out"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a login node: the SLURM tasks get the GPUs
    shown = dry_run(
        capsys,
        "--run",
        str(sweep),
        "--step",
        "start,3",
        "--task",
        "reverse,sort",
        "--out",
        str(out),
        "hydra/launcher=slurm_gpu",
        "hydra.launcher.partition=gpu",
    )
    points = shown.split("\neval #")
    assert len(points) == 2 and "trainer.loss.teacher_tau=0.5" in points[1]
    assert f"models: start (tiny), step_3 ({sweep / '1' / 'weights' / 'step_3'})" in points[1]
    assert "tasks: reverse, sort" in points[1] and "SLURM: partition=gpu nodes=1 gpus_per_node=2" in points[1]
    assert shown.endswith(
        f"dry run: 2 evaluation(s) checked, joined in {out / 'results.json'}; nothing started or written\n"
    )
    assert not out.exists()
    with pytest.raises(UserError) as e:
        dry_run(capsys, "--run", str(sweep), "--out", str(out))  # here, without them
    assert e.value.keys == ["deployment.num_infer_gpus"] and str(e.value).startswith("eval #0 ")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # the student's two: enough, the run's eight are not needed
    assert "here, on a vLLM server of its own (2 GPU(s))" in dry_run(capsys, "--run", str(sweep / "0"))
    checked = check_request(Request(sweep / "0", [], [], [], out))
    plan = build_plan(checked.cfg, tmp_path / "plan", visible_gpus())
    assert {r.name: r.gpus for r in plan.roles} == {"inference": ["0", "1"], "orchestrator": [], "trainer": []}
