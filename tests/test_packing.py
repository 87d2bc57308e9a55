"""Sequence packing (trainer.pack_tokens): whole samples share rows, each sample computed as if alone: the same
logprobs, the same step, on every rank the same micro-batch count."""

import pytest
import torch

from prime_rl.config import compose_config
from prime_rl.protocol.batch import TEACHER_LOGPROBS, Sample
from prime_rl.trainer.data import Row, TokenBatch, collate, collate_rows, rows_of
from prime_rl.trainer.distributed import World, rank_micro_batches
from prime_rl.trainer.model import policy_logprobs
from prime_rl.trainer.step import micro_batch_size
from tests.test_distributed import make_samples
from tests.test_trainer_numerics import run_step, samples, step_setup


def sample(prompt: int, completion: int, advantage: float = 0.0) -> Sample:
    return Sample([1] * prompt, [2] * completion, [-1.0] * completion, advantage)


def test_rows_hold_whole_samples_first_fit_longest_first():
    batch = [sample(2, 1), sample(5, 4), sample(3, 3), sample(20, 5), sample(1, 1), sample(4, 2)]  # 3 9 6 25 2 6
    rows = rows_of(batch, 12)
    assert [[s.length for s in row] for row in rows] == [[25], [9, 3], [6, 6], [2]]  # 25 > 12: a row of its own
    assert sorted(map(id, (s for row in rows for s in row))) == sorted(map(id, batch))  # each sample once
    assert rows_of(batch, 0) == [[s] for s in batch]  # off: one sample per row, in order


def test_a_packed_row_restarts_positions_and_keeps_each_samples_values():
    scored = Sample([7, 8], [9, 10], [-0.1, -0.2], advantage=1.0, streams={TEACHER_LOGPROBS: [-1.0, -2.0]})
    plain = Sample([7], [9], [-0.3], advantage=-0.5, loss_mask=[False])
    tb = collate_rows([[scored, plain], [plain]], pad_id=0)
    assert tb.input_ids.tolist() == [[7, 8, 9, 10, 7, 9], [7, 9, 0, 0, 0, 0]]
    assert tb.position_ids.tolist() == [[0, 1, 2, 3, 0, 1], [0, 1, 0, 0, 0, 0]]
    assert tb.loss_mask.tolist() == [[0, 0, 1, 1, 0, 0], [0] * 6]
    assert tb.advantages.tolist() == [[1.0] * 4 + [-0.5] * 2, [-0.5] * 2 + [0.0] * 4]
    assert tb.has_stream[TEACHER_LOGPROBS].tolist() == [[True] * 4 + [False] * 2, [False] * 6]
    assert tb.inference_logprobs[0].tolist() == pytest.approx([0, 0, -0.1, -0.2, 0, -0.3])  # mu, trained or not
    assert set(tb.model_inputs()) == {"input_ids", "position_ids", "use_cache"}  # positions tell them apart
    assert set(collate([scored, plain], 0).model_inputs()) == {"input_ids", "attention_mask", "use_cache"}


def per_sample(values: torch.Tensor, mb: TokenBatch, rows: list[Row]) -> dict[int, torch.Tensor]:
    """Each sample's values at its completion tokens, by the sample's identity."""
    out = {}
    for i, row in enumerate(rows):
        start = 0
        for s in row:
            out[id(s)] = values[i, start + len(s.prompt_ids) : start + s.length]
            start += s.length
    return out


@pytest.mark.parametrize("fused_head", [False, True], ids=["logits", "hidden states"])
@pytest.mark.parametrize("overrides", [[], ["model=tiny_qwen3"], ["lora=on"]], ids=["qwen2", "qwen3 tied", "lora"])
def test_a_sample_in_a_packed_row_gets_the_logprobs_it_gets_alone(overrides, fused_head):
    """The real model over a packed row: attention never crosses from one sample into the next (a sample that saw
    its neighbour would move its logprobs by far more than float noise), positions restart per sample."""
    setup = step_setup(*overrides)
    model, pad = setup.model, setup.pad_id
    batch = samples(7).samples
    alone, packed = [[s] for s in batch], rows_of(batch, 24)
    assert len(packed) < len(batch) and any(len(row) >= 2 for row in packed)
    got = {}
    with torch.no_grad():
        for rows in (alone, packed):
            mb = collate_rows(rows, pad)
            logprobs, entropy, _ = policy_logprobs(model, mb, 0.7, torch.float32, fused_head)
            got[len(rows)] = (per_sample(logprobs, mb, rows), per_sample(entropy, mb, rows))
    (lp_alone, h_alone), (lp_packed, h_packed) = got[len(alone)], got[len(packed)]
    for s in batch:
        torch.testing.assert_close(lp_packed[id(s)], lp_alone[id(s)], rtol=0, atol=2e-5)
        torch.testing.assert_close(h_packed[id(s)], h_alone[id(s)], rtol=0, atol=2e-5)


@pytest.mark.parametrize("overrides", [[], ["lora=on"]], ids=["full", "lora"])
def test_a_packed_step_is_the_padded_step_with_less_padding(overrides):
    padded, packed = step_setup(*overrides), step_setup(*overrides, "trainer.pack_tokens=24")
    for seed in (4, 5):
        a, b = run_step(padded, samples(seed)), run_step(packed, samples(seed))
        for key in ("loss", "entropy", "grad_norm", "mismatch_kl", "tokens"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
        assert b["throughput/padding_fraction"] < a["throughput/padding_fraction"]
    # Adam moves a weight by ~lr however small its gradient: float noise in a near-zero one shows at ~1e-6
    for p1, p2 in zip(padded.model.parameters(), packed.model.parameters()):
        torch.testing.assert_close(p1, p2, rtol=0, atol=1e-5)


@pytest.mark.parametrize("n,world,size,pack", [(9, 2, 1, 16), (7, 3, 2, 12), (5, 4, 1, 30)])
def test_every_rank_packs_its_share_into_as_many_micro_batches(n, world, size, pack):
    batch = make_samples(1, n)
    per_rank = [rank_micro_batches(batch, size, 0, World(rank, world), pack) for rank in range(world)]
    assert len({len(mbs) for mbs in per_rank}) == 1  # FSDP's collectives need the same count on every rank
    assert any(mb.position_ids is not None for mbs in per_rank for mb in mbs)  # something was packed
    tokens = sum(int(mb.loss_mask.sum()) for mbs in per_rank for mb in mbs)
    assert tokens == sum(len(s.completion_ids) for s in batch)  # each completion token exactly once


def test_auto_micro_batches_of_packed_rows_hold_as_many_tokens_as_padded_ones():
    long = [Sample(list(range(1024)), list(range(1024)), [])]
    packed = compose_config(["trainer.pack_tokens=8192"])
    assert micro_batch_size(packed, long, 151936, fused_head=True) == 16  # 64 rows of 2048 = 16 of 8192
    assert micro_batch_size(packed, long, 151936, fused_head=False) == 1  # 8192 x 152 k x 4 bytes: over 4 GiB alone
    assert micro_batch_size(compose_config(["trainer.pack_tokens=512"]), long, 151936, fused_head=True) == 64
