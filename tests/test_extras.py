"""A feature whose extra is not installed is one line naming the extra, before anything starts: real launches and
evaluations with the feature's package hidden (`sys.modules[name] = None`: importing it fails as if not installed)."""

import subprocess
import sys

import pytest

from prime_rl.config.user_error import UserError
from prime_rl.report.workspace import build_workspace
from tests.conftest import ROOT

# runs `python <script|-m module> args…` with the comma-separated modules of argv[1] not importable
HIDDEN = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = sys.argv[2:]
if sys.argv[0] == "-m":
    del sys.argv[0]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.integration
@pytest.mark.parametrize(
    ("hidden", "command", "extra"),
    [
        (
            "reasoning_gym",
            ["launch.py", "task=reasoning_gym", "task.dataset=basic_arithmetic", "hydra.run.dir={out}"],
            "reasoning-gym",
        ),
        (
            "hydra_plugins.hydra_submitit_launcher,submitit",
            ["launch.py", "-m", "hydra/launcher=slurm", "hydra.sweep.dir={out}"],
            "slurm",
        ),
        ("lm_eval", ["-m", "prime_rl.eval", "--harness", "gsm8k", "--out", "{out}"], "harness"),
    ],
)
def test_a_feature_without_its_extra_is_one_line_naming_it(hidden, command, extra, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", HIDDEN, hidden, *(arg.format(out=out) for arg in command)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert f"needs the {extra} extra" in line and f"pip install -e '.[{extra}]'" in line
    assert not out.exists()  # nothing started, nothing written


def test_a_workspace_without_the_report_extra_is_one_line_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports.v2", None)
    with pytest.raises(UserError, match=r"needs the report extra .* pip install -e '\.\[report\]'$"):
        build_workspace("entity", "project", "name", ("ID", "run"), [])
