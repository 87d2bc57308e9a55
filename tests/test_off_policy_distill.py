"""GKD's off-policy share in opd (modes.opd.on_policy, a mix source's on_policy): the student samples a share of each
step's prompts, the rest keep fixed completions (the reference answer, or the teacher's own first answers), which the
teacher scores through its store (teacher.cache_dir) and the trainer distils by the top-k divergence alone."""

import json

import pytest
import torch

from prime_rl.config import compose_config
from prime_rl.protocol.batch import Sample
from prime_rl.trainer.data import collate_rows
from prime_rl.trainer.loss import Objective, OffPolicyDistill, PolicyLoss, top_k_distill
from tests.test_e2e_rl import launch, rows

GKD = ["training_mode=opd", "trainer.loss.distill=topk", "trainer.loss.distill_top_k=8", "trainer.loss.distill_kl=jsd"]


def test_fixed_completions_train_by_the_top_k_divergence_alone():
    """Objective.parts gives a step's fixed completions their own part, whose loss is teacher_tau x the top-k
    divergence with no policy term: no sampler's logprobs (mu) and an advantage change nothing."""
    cfg = compose_config([*GKD, "modes.opd.on_policy=0.5"])
    top = [[1, 2], [3, 4]]
    scored = dict(streams={"teacher_logprobs": [-0.5, -0.7]}, mode="opd", advantage=2.0)
    sampled = Sample([5, 6], [1, 3], [-0.4, -0.6], **scored)
    fixed = Sample([5, 6], [2, 4], [], off_policy=True, **scored)
    for s in (sampled, fixed):
        s.teacher_top_ids = torch.tensor(top, dtype=torch.int32)
        s.teacher_top_logprobs = torch.tensor([[-0.5, -1.5], [-0.7, -1.0]])
    objective = Objective(cfg)
    parts = objective.parts([sampled, fixed, sampled])
    assert [(type(loss), len(share)) for loss, share in parts] == [(PolicyLoss, 2), (OffPolicyDistill, 1)]
    loss, share = parts[1]
    mb = collate_rows([share], pad_id=0)
    torch.manual_seed(0)
    token, top_lp = torch.randn(1, mb.input_ids.shape[1]).clamp(max=-0.1), -torch.rand(1, mb.input_ids.shape[1], 2)
    out = type("Out", (), {"token": token, "top": top_lp})()
    got, _ = loss.for_step([mb])(out, mb, total_tokens=7)
    want, _ = top_k_distill(top_lp, token, mb, loss.loss_cfg, 7)
    assert got.item() == pytest.approx(want.item()) and got.item() != 0


@pytest.mark.vllm
def test_gkd_mixes_the_students_samples_with_fixed_answers_and_asks_the_teacher_each_sequence_once(tmp_path):
    """Half the prompts on policy, half on their reference answers, the same 16 prompts every step: the off-policy
    samples are the answers, the reward metrics the student's alone, and each step asks the teacher for exactly the
    sequences no earlier step had (the store holds the rest). Then every prompt on the teacher's own first answers:
    after the first step the teacher is asked nothing (its answers cached, their scores stored)."""
    common = [*GKD, "task.num_train=16", "orchestrator.log_samples=1000", "orchestrator.eval.interval=0"]
    run_dir = tmp_path / "mixed"
    run = launch(
        run_dir,
        *common,
        f"teacher.cache_dir={tmp_path / 'store'}",
        "modes.opd.on_policy=0.5",
        "max_steps=3",
        "monitor=off",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    train = [r for r in rows(run_dir) if "loss" in r]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    seen: set[tuple[int, ...]] = set()
    for r in train:
        mine = [s for s in samples if s["step"] == r["step"]]
        fixed = [s for s in mine if s["off_policy"]]
        assert 0 < r["distill/on_policy"] < 1 and fixed, r
        words = [s["prompt"].split("reverse: ")[1].split("<")[0] for s in fixed]
        assert [s["completion"] for s in fixed] == [f"{word[::-1]}<|im_end|>" for word in words]
        sampled = [s["reward"] for s in mine if not s["off_policy"]]
        assert r["reward/mean"] == pytest.approx(sum(sampled) / len(sampled))
        sequences = {tuple(s["prompt_ids"] + s["completion_ids"]) for s in mine}
        assert r["teacher/store_misses"] == len(sequences - seen), r
        seen |= sequences
    assert train[-1]["teacher/store_hits"] > 0

    # a store of its own: the teacher's answers are mostly the reference answers, whose scores the first store holds
    teacher_dir = tmp_path / "teacher_answers"
    run = launch(
        teacher_dir,
        *common,
        f"teacher.cache_dir={tmp_path / 'own'}",
        "modes.opd.on_policy=0",
        "modes.opd.fixed=teacher",
        "max_steps=2",
        "monitor=off",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    first, second = [r for r in rows(teacher_dir) if "loss" in r]
    assert first["teacher/store_misses"] > 0 and second["teacher/store_misses"] == 0, (first, second)
    assert second["teacher/cache_hits"] > 0 and "reward/mean" not in second
