"""Ecosystem tasks for real: rl on a reasoning-gym dataset, a verifiers taskset and your own data scored by
math-verify, with eval samples_per_prompt > 1 (avg@k, pass@k), through real vLLM rollouts and the verifier
processes."""

import json

import pytest

from tests.conftest import ROOT
from tests.test_e2e_rl import launch, rows

# random-init students (no warm start): the runs prove the plumbing, the learning curves are in docs/how-to/
FAST = ["model.warm_start.steps=0", "max_steps=2", "orchestrator.eval.interval=2", "orchestrator.eval.num_examples=16"]


@pytest.mark.vllm
def test_rl_on_a_mix_of_reasoning_gym_a_verifiers_taskset_your_own_data_and_builtin_reports_pass_at_k_per_source(
    tmp_path, monkeypatch
):
    """Four kinds of source in one run: a reasoning-gym dataset, the built-in task, a verifiers taskset, and your own
    data file with a system prompt, scored by math-verify."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "examples"))  # the taskset id is a module the processes import
    data = tmp_path / "arithmetic.jsonl"
    data.write_text(
        "".join(json.dumps({"q": f"{a}+{b}=", "sum": str(a + b)}) + "\n" for a in range(20) for b in range(20))
    )
    own_data = (
        f"{{name:hf,path:'{data}',prompt_key:q,answer_key:sum,verifier:math,"
        "system_prompt:'Answer with the number only.',label:arithmetic}"
    )
    run = launch(
        tmp_path / "run",
        "task=mix",
        "task.mix=[{name:reasoning_gym,dataset:spell_backward,options:{max_word_len:5},weight:3},{name:reverse},"
        f"{{name:verifiers,env:reverse_taskset,options:{{num_tasks:500}},weight:2}},{own_data}]",
        "orchestrator.eval.samples_per_prompt=4",
        "orchestrator.log_samples=128",
        "monitor=off",
        *FAST,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    evals = [r for r in rows(tmp_path / "run") if "eval/reward" in r]
    assert [r["step"] for r in evals] == [0, 2]  # the base model's eval at step 0, and the final one
    for r in evals:
        for prefix in ("eval", "eval/spell_backward", "eval/reverse", "eval/reverse_taskset", "eval/arithmetic"):
            assert r[f"{prefix}/pass@1"] <= r[f"{prefix}/pass@2"] <= r[f"{prefix}/pass@4"]
        assert r["eval/avg@4"] == r["eval/reward"]
    train = [r for r in rows(tmp_path / "run") if "loss" in r]
    assert all("reward/spell_backward" in r and "reward/reverse_taskset" in r for r in train)
    assert any("reward/arithmetic" in r for r in train)  # a seventh of the prompts: a step may draw none
    assert train[-1]["verifier/calls"] == 2 * 128 + 16 * 4
    assert all(r["verifier/errors"] == 0 and r["verifier/timeouts"] == 0 for r in train)
    prompts = [json.loads(line)["prompt"] for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert any("Answer with the number only." in p for p in prompts)  # your data's system prompt
