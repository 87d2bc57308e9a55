"""A sweep's points are Hydra's own: the validating sweeper expands a command line as Hydra's basic sweeper does
(its cartesian product and order; a key given twice counts once, with its last value), then validates each point."""

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, launch_cmd

COMMAND_LINES = {
    # the issue's: two jobs, both teacher_tau=1.0, where Hydra runs one
    "a key given twice": ["training_mode=opd", "trainer.loss.teacher_tau=0.1,0.5", "trainer.loss.teacher_tau=1.0"],
    "a range, a glob and choices": ["seed=range(1,3)", "correction=glob(*_tis)", "max_steps=2,3", "max_steps=4,5"],
}


def dry_sweep(sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    run = subprocess.run(
        launch_cmd("-m", *overrides, "launcher.dry_run=true", f"hydra.sweep.dir={sweep_dir}"),
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.mark.integration
@pytest.mark.parametrize("name", COMMAND_LINES)
def test_a_sweep_has_the_points_hydras_own_sweeper_runs(tmp_path, name):
    """Hydra's basic sweeper runs each point (a dry run each: nothing starts) and records its overrides in the job's
    .hydra/overrides.yaml; this project's sweeper, dry-run on SLURM, prints the jobs it would submit."""
    line = COMMAND_LINES[name]
    dry_sweep(tmp_path / "hydra", *line, "hydra/sweeper=basic")
    jobs = sorted((tmp_path / "hydra").glob("*/.hydra/overrides.yaml"), key=lambda p: int(p.parent.parent.name))
    hydras = [yaml.safe_load(job.read_text()) for job in jobs]
    ours = yaml.safe_load(dry_sweep(tmp_path / "ours", *line, "hydra/launcher=slurm").stdout)["jobs"]
    assert [job["overrides"] for job in ours] == hydras
    assert len(hydras) == {"a key given twice": 1, "a range, a glob and choices": 2 * 3 * 2}[name]
