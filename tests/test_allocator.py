"""tcmalloc, preloaded into every process of a CPU run where it is installed (launcher/allocator.py)."""

import json
import os
import subprocess
import sys

import pytest

from prime_rl.launcher.allocator import preload_env, tcmalloc
from tests.conftest import ROOT, launch_cmd

needs_tcmalloc = pytest.mark.skipif(
    tcmalloc() is None, reason="libtcmalloc_minimal is not installed (apt-get install libtcmalloc-minimal4)"
)


@needs_tcmalloc
def test_tcmalloc_goes_before_the_users_preloads_and_a_users_own_tcmalloc_or_the_knob_leaves_them(monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert preload_env(True) == {"LD_PRELOAD": tcmalloc()}
    monkeypatch.setenv("LD_PRELOAD", "libmine.so")
    assert preload_env(True) == {"LD_PRELOAD": f"{tcmalloc()}:libmine.so"}
    assert preload_env(False) == {}
    monkeypatch.setenv("LD_PRELOAD", "/opt/libtcmalloc.so.4")
    assert preload_env(True) == {}


@pytest.mark.integration
@needs_tcmalloc
def test_every_role_without_a_gpu_runs_with_tcmalloc_loaded(tmp_path):
    plan = subprocess.run(
        launch_cmd("launcher.dry_run=true", f"hydra.run.dir={tmp_path}"), capture_output=True, text=True, cwd=ROOT
    )
    assert plan.returncode == 0, plan.stderr
    roles = json.loads((tmp_path / "configs" / "plan.json").read_text())["roles"]
    assert len(roles) == 3 and all(role["env"].get("LD_PRELOAD") == str(tcmalloc()) for role in roles), roles
    # what that preload does to a process: the allocator is mapped before the program runs
    maps = subprocess.run(
        [sys.executable, "-c", "print(open('/proc/self/maps').read())"],
        env={**os.environ, **preload_env(True)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "libtcmalloc_minimal" in maps.stdout
