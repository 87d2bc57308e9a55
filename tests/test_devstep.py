"""`python -m prime_rl.devstep`: one orchestrator step and one trainer step in one process around the student's vLLM
server, for real (rl, and opsd, where that server also scores); a run that needs another server is refused in one
line before anything starts; and what it reports of the samples."""

import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from prime_rl.devstep.orchestrator import group_numbers, trained_mean
from prime_rl.protocol.batch import Sample
from tests.conftest import ROOT

SMALL = ["orchestrator.batch_size=16", "orchestrator.rollouts_per_example=4", "orchestrator.eval.interval=0"]
MARKER = "DEVSTEP_TEST_MARKER"  # in the environment of everything the command starts: how its leftovers are found


def devstep(*args: str, marker: str = "", timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, MARKER: marker} if marker else None
    command = [sys.executable, "-m", "prime_rl.devstep", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def marked(marker: str) -> list[int]:
    """Live processes (not this one) whose environment holds MARKER=marker."""
    needle, pids = f"{MARKER}={marker}\0".encode(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            found = needle in (entry / "environ").read_bytes() + b"\0"
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if found and state not in "ZX":
            pids.append(int(entry.name))
    return pids


@pytest.mark.vllm
def test_one_step_in_one_process_makes_a_batch_and_trains_on_it(tmp_path):
    """opsd on the default task with a small step (rl's step and the student's own server scoring it): 4 groups of 4
    samples with rewards, advantages centred per group, each scored by the server that sampled it, the trainer's
    tokens those of the samples, a finite loss on a policy the trainer reproduces (the starting weights reloaded from
    weights/step_0). Nothing it started outlives it; its --run-dir stays, with the server's log."""
    facts_file, marker, mode, run_dir = tmp_path / "facts.json", uuid.uuid4().hex, "opsd", tmp_path / "run"
    args = [f"training_mode={mode}", *SMALL, "--json", str(facts_file), "--run-dir", str(run_dir)]
    run = devstep(*args, marker=marker)
    assert run.returncode == 0, run.stderr[-3000:]
    assert not marked(marker), "a process of the devstep outlived it"
    facts = json.loads(facts_file.read_text())
    assert facts["modes"] == [mode]

    samples = facts["samples"]
    assert len(samples) == 16 and [s["group"] for s in samples] == [g for g in range(4) for _ in range(4)]
    for g in range(4):
        group = samples[4 * g : 4 * g + 4]
        assert len({s["prompt"] for s in group}) == 1
        assert all(0 <= s["reward"] <= 1 for s in group)
        assert abs(sum(s["advantage"] for s in group)) < 1e-4, group
    assert all(s["mode"] == mode and s["completion"] and s["sampler_logprob_mean"] < 0 for s in samples)

    (part,) = facts["token_batch"]
    trained = sum(s["trained_tokens"] for s in samples)
    assert part["mode"] == mode and part["samples"] == part["rows"] == 16
    assert part["tokens"] == sum(s["prompt_tokens"] + s["completion_tokens"] for s in samples)
    assert part["trained_tokens"] == trained == facts["trainer_metrics"]["tokens"]

    metrics = facts["trainer_metrics"]
    assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"]) and metrics["optim/skipped"] == 0
    assert metrics["mismatch_kl"] < 1e-3, metrics  # the trainer's pi is the policy that sampled
    assert facts["orchestrator_metrics"]["verifier/calls"] == 16

    assert all(s["teacher"] == "self" and s["scorer_logprob_mean"] < 0 for s in samples)
    assert part["streams"] == {"teacher_logprobs": trained} and math.isfinite(metrics["teacher_kl"])
    log = (run_dir / "logs" / "inference.log").read_text()
    assert log.count("POST /v1/completions") >= 2  # sampled, then scored, by the one server
    assert (run_dir / "weights" / "step_0").is_dir()


@pytest.mark.integration
@pytest.mark.parametrize(
    "overrides, key",
    [
        (["training_mode=opd"], "teacher.kind"),
        (["trainer.loss.kl_ref_tau=0.1", "trainer.loss.kl_ref_from=vllm"], "trainer.loss.kl_ref_from"),
    ],
    ids=["local-teacher", "served-reference"],
)
def test_a_run_that_needs_another_server_is_refused_in_one_line_before_anything_starts(tmp_path, overrides, key):
    run = devstep(*overrides, "--run-dir", str(tmp_path / "run"), timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    [line] = run.stderr.splitlines()
    assert line.startswith(f"error: invalid config [{key}]") and "; fix: " in line, run.stderr
    assert not (tmp_path / "run").exists()


def test_a_prompts_samples_are_a_group_and_means_are_over_the_trained_tokens():
    def sample(prompt: list[int]) -> Sample:
        return Sample(prompt, [7], [-1.0])

    assert group_numbers([sample([1]), sample([1]), sample([2]), sample([2]), sample([1])]) == [0, 0, 1, 1, 2]
    assert trained_mean([-1.0, -3.0, -5.0], [True, False, True]) == -3.0
    assert trained_mean([None, -2.0], None) == -2.0
    assert trained_mean([], None) is None and trained_mean([-1.0], [False]) is None


@pytest.mark.vllm
def test_a_standing_server_stops_when_the_process_it_was_started_with_ends(tmp_path):
    """`python -m prime_rl.serve --stop-with PID` (the suite's standing servers pass their worker's pid): when that
    process ends, however it ends, the server stops and nothing it started is left; a pid that is not running is
    refused in one line before anything starts."""
    marker, owner = uuid.uuid4().hex, subprocess.Popen(["sleep", "600"])
    env = {**os.environ, MARKER: marker, "VLLM_API_KEY": "a-key"}
    serve = [sys.executable, "-m", "prime_rl.serve", *SMALL, "--run-dir", str(tmp_path / "run")]
    server = subprocess.Popen(
        [*serve, f"--stop-with={owner.pid}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert "serves at" in server.stdout.readline(), server.stderr.read()
        owner.kill()
        owner.wait()
        assert server.wait(timeout=120) == 0
    finally:
        for proc in (owner, server):
            proc.kill()
    assert not marked(marker), "a process of the server outlived it"
    refused = subprocess.run([*serve, f"--stop-with={owner.pid}"], capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "[--stop-with]" in refused.stderr and "; fix: " in refused.stderr
