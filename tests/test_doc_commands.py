"""Every `python launch.py …` command the README and the docs' Getting started and How-to pages give is checked as a
dry run (`launcher.dry_run=true`: composed, validated, planned, nothing started), on a node of 8 GPUs as far as the
launcher can tell (CUDA_VISIBLE_DEVICES), with a key in the env vars the commands name; and every
`python -m prime_rl.eval …` command as its own dry run (`--dry-run`: every point checked, nothing started), on a run
dir and a sweep dir laid out as launches leave them. A command that needs what this machine lacks is listed in
UNCHECKED with the reason; the runs the commands start are the e2e tests' (and tests/test_eval.py's)."""

import os
import re
import shlex
from pathlib import Path

import pytest

from prime_rl.eval.__main__ import evaluate, parse_args
from tests.conftest import ROOT
from tests.forked_launch import run_launch
from tests.run_dir_layouts import run_dir_with, sweep_dir_of

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "getting-started").glob("*.md"))]
PAGES += [
    *sorted((ROOT / "docs" / "how-to").glob("*.md")),
    ROOT / "docs" / "eval.md",
    ROOT / "docs" / "standing_server.md",
]
# a fragment of the command -> why no dry run here proves it
UNCHECKED = {
    "<its overrides>": "a template: the run's own overrides go there",
    "127.0.0.1:PORT": "needs a standing server (docs/standing_server.md; tests/test_devstep.py starts one)",
    "model.name=Qwen/": "downloads its model from the Hugging Face hub (none here: tests/test_hub_models.py fakes one)",
    "task.path=HuggingFaceH4/": "downloads its dataset from the Hugging Face hub",
    "data/train.parquet": "a user's own files (tests/test_tasks.py reads such files)",
    "task.path=train.jsonl": "a user's own file (tests/test_tasks.py reads such files)",
    "my_lm_eval_tasks/": "a user's own lm-eval task YAMLs (tests/test_eval.py evaluates such a task)",
    "model:Qwen/": "downloads its judge from the Hugging Face hub",
    "/models/my-reward-model": "a user's own reward model (tests/test_judge.py builds and serves one)",
}
ENV = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(8))), "OPENAI_API_KEY": "sk-doc-commands-not-a-key"}


def documented(command: str) -> list[tuple[str, str]]:
    """(page, command) for each line of the pages' code blocks that runs `command` (after env settings),
    continuation lines joined."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #", 1)[0].strip()
                if re.match(rf"(\w+=\S+ )*{re.escape(command)}(\s|$)", line):
                    found.append((str(page.relative_to(ROOT)), line))
    return found


def checked(commands: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(page, c) for page, c in commands if not any(fragment in c for fragment in UNCHECKED)]


COMMANDS = documented("python launch.py")
CHECKED = checked(COMMANDS)
EVALS = documented("python -m prime_rl.eval")
EVALS_CHECKED = checked(EVALS)


def test_the_pages_give_launch_commands_and_every_unchecked_one_is_still_there():
    """An UNCHECKED entry whose command changed would excuse nothing: each must still match a documented one."""
    assert len(CHECKED) >= 20 and "README.md" in {page for page, _ in CHECKED}
    assert len(EVALS_CHECKED) >= 5 and "docs/eval.md" in {page for page, _ in EVALS_CHECKED}
    assert [f for f in UNCHECKED if not any(f in c for _, c in COMMANDS + EVALS)] == []


@pytest.mark.integration
@pytest.mark.parametrize("page, command", CHECKED, ids=[f"{p}: {c}" for p, c in CHECKED])
def test_a_documented_command_dry_runs(page, command, tmp_path):
    words = shlex.split(command)
    env = ENV | dict(w.split("=", 1) for w in words[: words.index("python")])  # `PYTHONPATH=examples python …`
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] = str(ROOT / env["PYTHONPATH"])
    args = words[words.index("launch.py") + 1 :]
    where = [f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    done = run_launch([*args, "launcher.dry_run=true", *where], os.environ | env, tmp_path, timeout=120)
    assert done.returncode == 0, f"{page}: {command}\n{done.stderr[-2000:]}"


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict[str, Path]:
    """What the eval commands' placeholders stand for: a run (a LoRA opd run with a local teacher: it has steps,
    a merged model and a teacher) and a teacher_tau sweep of two jobs, each laid out as its launch left it."""
    root = tmp_path_factory.mktemp("launched")
    run = ["training_mode=opd", "teacher=local_vllm", "lora=on"]
    return {
        "outputs/": run_dir_with(root / "run", exports=[100, 200], merged=True, overrides=run, adapters=True),
        "multirun/": sweep_dir_of(root / "sweep", [0.1, 0.5], exports=[200]),
    }


@pytest.mark.integration
@pytest.mark.parametrize("page, command", EVALS_CHECKED, ids=[f"{p}: {c}" for p, c in EVALS_CHECKED])
def test_a_documented_evaluation_dry_runs(page, command, launched, capsys):
    """In this process: the command's own parsing and checks (`evaluate`), without its signal handling."""
    for placeholder, path in launched.items():  # outputs/<date>/<time>, multirun/2026-12-05/10-00-00-000000
        command = re.sub(rf"{placeholder}\S+", str(path), command)
    args = shlex.split(command)[len(shlex.split("python -m prime_rl.eval")) :]
    evaluate(parse_args([*args, "--dry-run"]))
    shown = capsys.readouterr().out
    assert re.search(r"^dry run: \d+ evaluation\(s\) checked.*; nothing started or written$", shown, re.M), shown
    assert [p for path in launched.values() for p in path.rglob("evals")] == []
