"""Every `python launch.py …` command the README and the docs' Getting started and How-to pages give is checked as a
dry run (`launcher.dry_run=true`: composed, validated, planned, nothing started), on a node of 8 GPUs as far as the
launcher can tell (CUDA_VISIBLE_DEVICES), with a key in the env vars the commands name. A command that needs what
this machine lacks is listed in UNCHECKED with the reason; the runs the commands start are the e2e tests'."""

import os
import re
import shlex

import pytest

from tests.conftest import ROOT
from tests.forked_launch import run_launch

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
}
ENV = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(8))), "OPENAI_API_KEY": "sk-doc-commands-not-a-key"}


def documented_launches() -> list[tuple[str, str]]:
    """(page, command) for each `python launch.py` line in the pages' code blocks, continuation lines joined."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                command = line.split(" #", 1)[0].strip()
                if re.match(r"(\w+=\S+ )*python launch\.py\b", command):
                    found.append((str(page.relative_to(ROOT)), command))
    return found


COMMANDS = documented_launches()
CHECKED = [(page, c) for page, c in COMMANDS if not any(fragment in c for fragment in UNCHECKED)]


def test_the_pages_give_launch_commands_and_every_unchecked_one_is_still_there():
    """An UNCHECKED entry whose command changed would excuse nothing: each must still match a documented one."""
    assert len(CHECKED) >= 20 and "README.md" in {page for page, _ in CHECKED}
    assert [f for f in UNCHECKED if not any(f in c for _, c in COMMANDS)] == []


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
