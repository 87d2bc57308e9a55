"""`python launch.py` for real: vLLM server, orchestrator and trainer on CPU, learning on the reverse task."""

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, launch_cmd
from tests.standing_servers import StandingServers

# what a step does in turns, beside the hand-offs between them
PHASES = ("time/reload", "time/generate", "time/score", "time/teacher", "time/eval", "time/train", "time/export")
# A short run that learns clearly on 2 CPU cores: 50 steps (~1 min), a higher lr than the long default run.
SHORT = ["max_steps=50", "trainer.optim.lr=5e-4", "orchestrator.eval.interval=50"]


def run_processes(marker: str) -> list[int]:
    """Pids of live processes whose command line mentions `marker` (a run dir) or whose output goes to a file under
    it (a role's log: a server forked by the server factory shows the factory's command line)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            output = os.readlink(entry / "fd" / "1") if (entry / "fd" / "1").exists() else ""
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (marker in cmdline or output.startswith(marker)) and state != "Z" and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


def launch(
    run_dir: Path, *overrides: str, timeout: int = 900, standing: StandingServers | None = None
) -> subprocess.CompletedProcess:
    """`python launch.py <overrides>` in `run_dir`; with `standing`, on a standing student server of its recipe."""
    attach = standing.overrides(*overrides) if standing else []
    proc = subprocess.run(
        launch_cmd(*overrides, *attach, f"hydra.run.dir={run_dir}"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env=standing.env() if standing else None,
    )
    assert not run_processes(str(run_dir)), "processes of the run outlived the launcher"
    return proc


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl, one dict per line."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def plan_of(run_dir: Path) -> dict:
    """The launch's process plan (configs/plan.json)."""
    return json.loads((run_dir / "configs" / "plan.json").read_text())


def eval_gain_in_standard_errors(run_dir: Path) -> float:
    """The last eval's reward minus the first's, over the standard error of that difference: each eval is a
    sample of prompts (~0.02 for 128), so a gain of 4 or more is learning, not noise."""
    evals = [r for r in rows(run_dir) if "eval/reward" in r]
    first, last = evals[0], evals[-1]
    noise = math.hypot(first["eval/reward_stderr"], last["eval/reward_stderr"])
    return (last["eval/reward"] - first["eval/reward"]) / noise


@pytest.mark.vllm
def test_rl_improves_eval_reward_and_lr_zero_does_not(tmp_path, standing_servers):
    """The reference experiment (experiment=rl, shorter and at a higher lr) learns; the same run at lr 0 does not.
    Both on one standing server: the second run serves its own starting weights, not what the first left there."""
    learn = launch(tmp_path / "learn", "experiment=rl", *SHORT, standing=standing_servers)
    assert learn.returncode == 0, learn.stderr[-3000:]
    assert not (tmp_path / "learn" / "merged").exists()  # full fine-tuning: no merged adapter
    s = summary(tmp_path / "learn")
    assert s["steps"] == 50 and s["eval/step_first"] == 0 and s["eval/step_final"] == 50
    assert eval_gain_in_standard_errors(tmp_path / "learn") > 2, s  # the project's bar for "better than noise"

    # the control also samples at T = 0.7: the trainer's pi must be the tempered sampling policy too; its eval is
    # greedy, so unchanged weights must give the same eval reward. It runs on policy, in turns (deployment=colocated,
    # the default layout on a CPU; opd, sft and LoRA run in turns in every other e2e test), so each step's row
    # holds the turns of that step: the orchestrator's for its batch, then the trainer's.
    frozen = launch(
        tmp_path / "frozen",
        "max_steps=4",  # a control: unchanged weights show in a few steps
        "orchestrator.eval.interval=4",
        "trainer.optim.lr=0",
        "orchestrator.sampling.temperature=0.7",
        "orchestrator.eval.temperature=0",
        "deployment=colocated",
        "orchestrator.max_async_level=0",
        f"launcher.weights_dir={tmp_path / 'scratch'}",  # the exports elsewhere, as on a GPU node's own disk
        standing=standing_servers,
    )
    assert frozen.returncode == 0, frozen.stderr[-3000:]
    plan = plan_of(tmp_path / "frozen")
    assert plan["layout"] == "colocated" and plan["standing_server"]
    assert [r["name"] for r in plan["roles"]] == ["orchestrator", "trainer"]  # no server of its own
    assert not os.listdir(tmp_path / "scratch") and not (tmp_path / "frozen" / "weights").exists()  # gone with it
    f = summary(tmp_path / "frozen")
    assert abs(f["eval/reward_final"] - f["eval/reward_first"]) < 0.02, f
    frozen_train = [r for r in rows(tmp_path / "frozen") if "loss" in r]
    assert [r["step"] for r in frozen_train] == [0, 1, 2, 3]
    assert all(r["policy/staleness"] == 0 for r in frozen_train)
    # after step 0 (which also waits for the servers to start), the phases and the hand-offs between them make up
    # each step: two phases at once would add up to more than it, and the rest is what nothing accounts for
    later = frozen_train[1:]
    wall = sum(r["time/step"] for r in later)
    phases = sum(r.get(k, 0.0) for r in later for k in PHASES)
    handoffs = sum(r["time/handoff"] for r in later)
    assert phases <= wall and 0.85 * wall <= phases + handoffs <= 1.05 * wall, (wall, phases, handoffs)
    train_rows = [r for r in rows(tmp_path / "learn") if "loss" in r]
    assert [r["step"] for r in train_rows] == list(range(50))
    assert all(r["policy/staleness"] <= 1 for r in train_rows)  # max_async_level=1
    assert not any("teacher_kl" in r for r in train_rows)
    for key in (
        "reward/mean",
        "loss",
        "entropy",
        "mismatch_kl",
        "grad_norm",
        "lr",
        "time/generate",
        "time/train",
        "time/step",
        "throughput/tokens_per_s",
    ):
        assert all(key in r for r in train_rows), key
    # same weights and temperature on both sides, in float32: the server's logprobs are the trainer's (a broken
    # reload, or a trainer ignoring the sampling temperature, would show here)
    assert max(abs(r["mismatch_kl"]) for r in frozen_train) < 1e-6, [r["mismatch_kl"] for r in frozen_train]
    # so the default correction (band) has nothing to drop, and every weight is 1
    assert all(r["masked_fraction"] == 0 for r in frozen_train)
    assert all(r["correction/token_weight_max"] == pytest.approx(1, abs=1e-5) for r in frozen_train)


@pytest.mark.vllm
def test_the_off_policy_corrections_act_where_the_trainer_computes_in_bf16(tmp_path, standing_servers):
    """The server samples in float32, the trainer computes in bf16: every weight pi/mu is off 1 by bf16's rounding
    (mismatch_kl ~1e-5), so each family member has tokens to act on. Truncation at 1 (token_tis) scales down every
    token the trainer likes more than the sampler did and drops nothing; a sequence mask of [0.999, 1.001]
    (seq_mask_tis) drops whole samples, whose tokens the masked share counts, and truncates within the rest."""
    common = ["debug=smoke", "trainer.dtype=bfloat16", "monitor=off", "trainer.loss.correction.truncate_at=1"]
    runs = {
        "token_tis": [],
        "seq_mask_tis": ["trainer.loss.correction.mask_low=0.999", "trainer.loss.correction.mask_high=1.001"],
    }
    train = {}
    for preset, bounds in runs.items():
        proc = launch(tmp_path / preset, *common, f"correction={preset}", *bounds, standing=standing_servers)
        assert proc.returncode == 0, proc.stderr[-3000:]
        train[preset] = [r for r in rows(tmp_path / preset) if "loss" in r]
        assert [r["step"] for r in train[preset]] == [0, 1, 2]
        for r in train[preset]:
            assert r["mismatch_kl"] > 1e-8 and r["correction/token_weight_max"] > 1, r
            assert 0 < r["correction/truncated_token"] < 1 and r["correction/truncated_sequence"] == 0, r
    assert all(r["masked_fraction"] == 0 for r in train["token_tis"])
    for r in train["seq_mask_tis"]:
        assert 0 < r["correction/masked_sequence"] == r["masked_fraction"] < 1, r
        assert r["correction/masked_token"] == r["correction/masked_prob_band"] == 0, r


@pytest.mark.vllm
def test_weights_pushed_over_gloo_from_fsdp_ranks_keep_the_server_on_the_trainers_weights(tmp_path):
    """inference.weight_transfer=gloo, the CPU counterpart of nccl: no weight files; between two generations the
    orchestrator asks for each version and rank 0 of an FSDP trainer, whose ranks gather each parameter, pushes it
    through vLLM's weight-transfer routes (pushed in turns by one process: tests/test_modes.py's opsd run). On
    policy, mismatch_kl stays at float noise while the weights move (a push that left the server one step behind
    would show 1e-4 or more, as the learning run's staleness-1 steps do), and the final weights reach the server for
    the last evaluation."""
    run_dir = tmp_path / "run"
    overrides = ["debug=smoke", "orchestrator.max_async_level=0", "trainer.num_procs=2"]
    proc = launch(run_dir, *overrides, "trainer.optim.lr=1e-3", "inference.weight_transfer=gloo", "monitor=off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_pushed_over_gloo(run_dir, "separate")


def assert_pushed_over_gloo(run_dir: Path, layout: str) -> None:
    """A 3-step on-policy run (debug=smoke) whose weights went over gloo: the sampler's logprobs are the trainer's
    to float noise at every step, each step pushed, the final weights evaluated, and no weight file written."""
    plan, lines = plan_of(run_dir), rows(run_dir)
    assert (plan["layout"], plan["weights"]) == (layout, "gloo")
    train = [r for r in lines if "loss" in r]
    assert [r["step"] for r in train] == [0, 1, 2]
    assert max(abs(r["mismatch_kl"]) for r in train) < 1e-6, [r["mismatch_kl"] for r in train]
    assert max(r["grad_norm"] for r in train) > 0 and all(r["time/push"] > 0 for r in train)
    assert lines[-1]["step"] == 3 and "eval/reward" in lines[-1]
    weights = run_dir / "weights"
    assert not [p for p in weights.rglob("*") if p.suffix in (".safetensors", ".json")]  # nothing but markers
    assert sorted(p.name for p in (weights / "step_3").iterdir()) == ["PUSHED", "REQUESTED", "STABLE"]


@pytest.mark.vllm
def test_rl_on_the_tied_qwen3_family_keeps_the_server_on_the_trainers_weights(tmp_path):
    """model=tiny_qwen3 (q/k norm, tied embeddings, BPE): at max_async_level=0 every batch is sampled by the
    weights the trainer holds, so mismatch_kl stays at float noise (with vLLM's own reload it grew to 1e-2). The
    trainer packs its samples (trainer.pack_tokens): a sample that saw its row's neighbours would not be; and it
    keeps a KL to the starting weights (trainer.loss.kl_ref_tau), served by a vLLM server of their own
    (kl_ref_from=vllm; the trainer's frozen copy has its own test in tests/test_trainer_numerics.py)."""
    run_dir = tmp_path / "run"
    overrides = ["model=tiny_qwen3", "max_steps=4", "orchestrator.max_async_level=0", "trainer.optim.lr=1e-3"]
    overrides += ["trainer.pack_tokens=256", "trainer.loss.kl_ref_tau=0.1", "trainer.loss.kl_ref_from=vllm"]
    schedule = ["trainer.optim.warmup_steps=0", "trainer.optim.schedule=cosine"]
    proc = launch(run_dir, *overrides, *schedule, "monitor=off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = rows(run_dir)
    assert "eval/reward" in lines[0] and "eval/reward" in lines[-1]  # step 0 and the end
    train = [r for r in lines if "mismatch_kl" in r]
    assert [r["step"] for r in train] == [0, 1, 2, 3]
    assert max(abs(r["mismatch_kl"]) for r in train) < 1e-6, [r["mismatch_kl"] for r in train]
    # one sample per row leaves 11-21 % of the forward pass padding here (mean 16 %), rows of 256 tokens 4-8 %
    assert sum(r["throughput/padding_fraction"] for r in train) / len(train) < 0.1, train
    assert max(r["grad_norm"] for r in train) > 0  # the weights did change
    # the served reference: step 0 trains the starting weights, so its logprobs are the trainer's (KL at float
    # noise: a server of other weights, or scores of other tokens, would show); then the weights have moved
    assert train[0]["kl_ref"] < 1e-9 and train[-1]["kl_ref"] > 1e-6, [r["kl_ref"] for r in train]
    assert all(r["time/reference"] > 0 for r in train)
    # the cosine schedule decays from the peak over the run's 4 steps
    assert [r["lr"] for r in train] == pytest.approx([1e-3 * (1 + math.cos(math.pi * k / 4)) / 2 for k in range(4)])
