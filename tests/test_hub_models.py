"""Models named by a Hugging Face Hub id, resolved offline against a Hub cache the tests lay out themselves
(models--<org>--<name>/refs and snapshots/<commit>, as huggingface_hub writes it): the launcher resolves each id
once and every process loads that snapshot."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from prime_rl.config import compose_config, load_config
from prime_rl.prepare import prepare_student, prepare_teacher
from tests.conftest import ROOT, launch_cmd
from tests.test_e2e_rl import run_processes

MAIN, TAGGED = "1" * 40, "2" * 40  # commits


def hub_cache(root: Path, repo_id: str, refs: dict[str, tuple[str, Path]]) -> Path:
    """A Hub cache under `root` (HF_HOME) holding `repo_id` with each ref -> (commit, model dir copied there)."""
    repo = root / "hub" / f"models--{repo_id.replace('/', '--')}"
    for ref, (commit, model) in refs.items():
        shutil.copytree(model, repo / "snapshots" / commit, dirs_exist_ok=True)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return repo


def offline_env(hf_home: Path) -> dict[str, str]:
    return os.environ | {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}


def launch(env: dict, *overrides: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(launch_cmd(*overrides), capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """HF_HOME with testorg/student (main and tag v1: two commits) and testorg/teacher."""
    root = tmp_path_factory.mktemp("hf")
    cfg = compose_config(["training_mode=opd"])
    student, teacher = prepare_student(cfg), prepare_teacher(cfg)
    hub_cache(root, "testorg/student", {"main": (MAIN, student), "v1": (TAGGED, student)})
    hub_cache(root, "testorg/teacher", {"main": (MAIN, teacher)})
    return root


@pytest.mark.integration
def test_a_hub_id_resolves_once_to_the_snapshot_every_role_loads(hub, tmp_path):
    run_dir = tmp_path / "run"
    proc = launch(offline_env(hub), "model.name=testorg/student", "launcher.dry_run=true", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr
    snapshot = hub / "hub" / "models--testorg--student" / "snapshots" / MAIN
    for role in ("inference", "orchestrator", "trainer"):
        cfg = load_config(run_dir / "configs" / f"{role}.yaml")
        assert (cfg.model.name, cfg.model.path) == ("testorg/student", str(snapshot))
    server = json.loads((run_dir / "configs" / "plan.json").read_text())["roles"][0]
    assert server["name"] == "inference" and server["command"][server["command"].index("--model") + 1] == str(snapshot)


@pytest.mark.integration
def test_a_revision_picks_its_snapshot(hub, tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["model.name=testorg/student", "model.revision=v1", "launcher.dry_run=true"]
    proc = launch(offline_env(hub), *overrides, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr
    path = load_config(run_dir / "configs" / "trainer.yaml").model.path
    assert path == str(hub / "hub" / "models--testorg--student" / "snapshots" / TAGGED)


@pytest.mark.integration
@pytest.mark.parametrize(
    "overrides, says",
    [
        (
            ["model.name=testorg/nope"],
            "[model.name]: 'testorg/nope' is no local model dir, and as a Hub id: testorg/nope is not in the",
        ),
        (
            ["model.name=testorg/student", "model.revision=v9"],
            "[model.name, model.revision]: 'testorg/student' is no local model dir, and as a Hub id: testorg/student@",
        ),
        (["training_mode=opd", "teacher.model=testorg/nope"], "[teacher.model]: 'testorg/nope' is no local model dir"),
        (
            ["model.name=./models/nope"],
            "[model.name]: './models/nope' is neither 'tiny', a local Hugging Face model dir",
        ),
    ],
)
def test_a_missing_hub_model_is_one_line_before_anything_starts(hub, tmp_path, overrides, says):
    run_dir = tmp_path / "run"
    proc = launch(offline_env(hub), *overrides, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: invalid config ") and says in line, line
    assert ("HF_HUB_OFFLINE is set" in line) == ("as a Hub id" in line)
    assert not run_dir.exists()


@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_opd_runs_on_a_hub_student_and_a_hub_teacher(hub, tmp_path):
    """Both servers, the orchestrator and the trainer load the snapshots, offline, with no download."""
    run_dir = tmp_path / "run"
    overrides = [
        "training_mode=opd",
        "model.name=testorg/student",
        "teacher.model=testorg/teacher",
        "max_steps=2",
        "orchestrator.eval.interval=0",
        "monitor=off",
        f"hydra.run.dir={run_dir}",
    ]
    proc = launch(offline_env(hub), *overrides, timeout=540)
    assert not run_processes(str(run_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    snapshots = hub / "hub"
    for role, repo in (("inference", "student"), ("teacher_inference", "teacher")):
        log = (run_dir / "logs" / f"{role}.log").read_text()
        assert f"--model {snapshots / f'models--testorg--{repo}' / 'snapshots' / MAIN} " in log
    assert (run_dir / "metrics.jsonl").read_text().count('"teacher_kl"') == 2
