"""Unit tests of the pure pieces: losses by hand, advantages, the batch file, vLLM response parsing."""

import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from prime_rl.config import compose_config
from prime_rl.config.schema import CorrectionConfig, KlDirection, LossConfig
from prime_rl.inference.client import InferenceError, parse_completions, parse_prompt_logprobs, parse_top_logprobs
from prime_rl.orchestrator.advantages import grpo_advantages
from prime_rl.protocol.batch import FORMAT, TEACHER_LOGPROBS, Batch, BatchFormatError, Sample, read_batch, write_batch
from prime_rl.trainer.data import TokenBatch, collate, collate_rows
from prime_rl.trainer.logprobs import token_logprobs
from prime_rl.trainer.loss import distill_center, rl_loss, sft_loss, top_k_distill, top_k_divergence, with_tail
from prime_rl.trainer.step_metrics import metric_means


def one_sequence_batch(mu, advantage=1.0, teacher=None):
    """Two prompt tokens then len(mu) completion tokens; logprob slots are aligned to the predicted token."""
    n = 2 + len(mu)
    loss_mask = torch.tensor([[0, 0] + [1] * len(mu)])
    pad = lambda xs: torch.tensor([[0.0, 0.0] + list(xs)])  # noqa: E731
    return TokenBatch(
        input_ids=torch.zeros(1, n, dtype=torch.long),
        attention_mask=torch.ones(1, n, dtype=torch.long),
        loss_mask=loss_mask,
        inference_logprobs=pad(mu),
        advantages=torch.full((1, n), advantage),
        streams={TEACHER_LOGPROBS: pad(teacher)} if teacher is not None else {},
        has_stream={TEACHER_LOGPROBS: torch.ones(1, n, dtype=torch.bool)} if teacher is not None else {},
    )


def loss_with(adv_tau=1.0, teacher_tau=0.0, teacher_adv_clip=2.0, **correction) -> LossConfig:
    """The loss's knobs with `correction`'s fields changed from the band preset's."""
    fix = CorrectionConfig(**correction)
    return LossConfig(adv_tau=adv_tau, teacher_tau=teacher_tau, teacher_adv_clip=teacher_adv_clip, correction=fix)


def test_rl_loss_matches_a_hand_computation():
    pi = [math.log(0.5), math.log(0.4), math.log(0.9)]
    mu = [math.log(0.5), math.log(0.5), math.log(0.1)]  # token 3 leaves the 0.2 band: |0.9 - 0.1| = 0.8
    batch = one_sequence_batch(mu, advantage=2.0)
    logprobs = torch.tensor([[0.0, 0.0] + pi], requires_grad=True)
    loss, sums = rl_loss(logprobs, batch, LossConfig(adv_tau=1.0), total_tokens=4)
    # kept tokens: ratio 1.0 and 0.8, advantage 2 -> -(2*1 + 2*0.8) / 4 (normalised by the step's 4 tokens)
    assert loss.item() == pytest.approx(-(2 * 1.0 + 2 * 0.8) / 4)
    assert sums["masked_fraction"] == pytest.approx(1.0)
    loss.backward()
    assert logprobs.grad[0, 4] == 0  # the masked token gets no gradient
    assert logprobs.grad[0, 3].item() == pytest.approx(-2 * 0.8 / 4)  # d(-A*rho)/dlogpi = -A*rho / N


def test_the_importance_ratio_is_bounded_on_both_sides():
    # token 1: sampled at 0.001, now 0.15 (in the 0.2 probability band, ratio 150); token 2: 0.25 -> 0.1 (ratio
    # 0.4); token 3: on-policy. Only token 3 may train.
    pi = [math.log(0.15), math.log(0.1), math.log(0.5)]
    mu = [math.log(0.001), math.log(0.25), math.log(0.5)]
    batch = one_sequence_batch(mu, advantage=1.0)
    logprobs = torch.tensor([[0.0, 0.0] + pi], requires_grad=True)
    loss, sums = rl_loss(logprobs, batch, LossConfig(), total_tokens=3)
    assert loss.item() == pytest.approx(-1.0 / 3)
    assert (sums["correction/masked_token"], sums["correction/masked_prob_band"], sums["masked_fraction"]) == (2, 0, 2)
    loss.backward()
    assert logprobs.grad[0, 2:4].tolist() == [0.0, 0.0] and logprobs.grad[0, 4] != 0
    wide, _ = rl_loss(logprobs, batch, loss_with(mask_low=0.0, mask_high=0.0), total_tokens=3)
    assert wide.item() == pytest.approx(-(150 + 0.4 + 1.0) / 3, rel=1e-4)  # unbounded, token 1 dominates


def test_a_token_the_sampler_gave_no_probability_is_masked_not_a_nan_step():
    # vLLM reports a -inf logprob as -9999: rho = e^9999 = inf, and inf * 0 made the whole step NaN (then skipped)
    pi = [math.log(0.5), math.log(0.1)]  # in the probability band: the ratio mask must catch it
    batch = one_sequence_batch([math.log(0.5), -9999.0], advantage=1.0)
    logprobs = torch.tensor([[0.0, 0.0] + pi], requires_grad=True)
    loss, sums = rl_loss(logprobs, batch, LossConfig(kl_tau=0.1), total_tokens=2)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0 / 2) and sums["correction/masked_token"] == 1.0
    assert logprobs.grad[0].tolist() == pytest.approx([0.0, 0.0, -1.0 / 2, 0.0])


def test_a_teacher_logprob_of_minus_inf_is_floored_so_the_step_stays_finite():
    sample = Sample([7], [9, 10], [-0.7, -9999.0], streams={TEACHER_LOGPROBS: [-0.5, -math.inf]})
    batch = collate([sample], pad_id=0)
    assert batch.streams[TEACHER_LOGPROBS][0].tolist() == [0.0, -0.5, -100.0]
    assert batch.inference_logprobs[0].tolist() == pytest.approx([0.0, -0.7, -100.0])
    logprobs = torch.tensor([[0.0, -0.7, -0.7]], requires_grad=True)
    cfg = LossConfig(adv_tau=0.0, teacher_tau=1.0, teacher_adv_clip=0.0)
    loss, _ = rl_loss(logprobs, batch, cfg, total_tokens=2, teacher_center=0.0)
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(logprobs.grad).all()
    assert math.isfinite(distill_center([batch], cfg))


def test_reward_and_distillation_advantages_add_per_token():
    pi = [math.log(0.5), math.log(0.5)]
    teacher = [math.log(0.5) + 1.0, math.log(0.5) + 0.5]  # per-token distillation advantages 1.0 and 0.5
    batch = one_sequence_batch(pi, advantage=2.0, teacher=teacher)
    logprobs = torch.tensor([[0.0, 0.0] + pi], requires_grad=True)
    cfg = LossConfig(adv_tau=1.0, teacher_tau=0.5, teacher_adv_center=False)
    loss, _ = rl_loss(logprobs, batch, cfg, total_tokens=2, teacher_center=0.0)
    # A_t = adv_tau * 2 + teacher_tau * (1.0, 0.5) = (2.5, 2.25); ratio 1
    assert loss.item() == pytest.approx(-(2.5 + 2.25) / 2)
    loss.backward()
    assert logprobs.grad[0, 2:].tolist() == pytest.approx([-2.5 / 2, -2.25 / 2])


def test_kl_tau_adds_the_squared_log_ratio():
    pi, mu = [math.log(0.5)], [math.log(0.4)]
    batch = one_sequence_batch(mu, advantage=0.0)
    logprobs = torch.tensor([[0.0, 0.0] + pi])
    loss, _ = rl_loss(logprobs, batch, LossConfig(kl_tau=0.5), total_tokens=1)
    assert loss.item() == pytest.approx(0.5 * math.log(0.5 / 0.4) ** 2)


def test_distillation_advantage_is_clamped_centered_and_weighted():
    pi = [math.log(0.5), math.log(0.5)]
    teacher = [math.log(0.5) - 10.0, math.log(0.5) + 1.0]  # raw advantages -10 and +1
    batch = one_sequence_batch(pi, advantage=0.0, teacher=teacher)
    logprobs = torch.tensor([[0.0, 0.0] + pi])
    cfg = LossConfig(adv_tau=0.0, teacher_tau=0.5, teacher_adv_clip=2.0)
    center = distill_center([batch], cfg)
    assert center == pytest.approx((-2.0 + 1.0) / 2)
    loss, sums = rl_loss(logprobs, batch, cfg, total_tokens=2, teacher_center=center)
    # clamped (-2, +1), centered (-1.5, +1.5), weighted by 0.5 -> sum 0: loss 0; teacher_kl = mean(pi - pT)
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
    assert sums["teacher_kl"] / 2 == pytest.approx((10.0 - 1.0) / 2)


def test_sft_loss_is_token_normalised_nll():
    batch = one_sequence_batch([0.0, 0.0])
    logprobs = torch.tensor([[-5.0, -5.0, -1.0, -3.0]])
    loss, _ = sft_loss(logprobs, batch, total_tokens=4)
    assert loss.item() == pytest.approx((1.0 + 3.0) / 4)


def test_token_logprobs_picks_the_next_token():
    logits = torch.log(torch.tensor([[[0.1, 0.9], [0.7, 0.3], [0.5, 0.5]]]))
    ids = torch.tensor([[0, 1, 0]])
    out, entropy, _ = token_logprobs(logits, ids)
    assert out[0].tolist() == pytest.approx([0.0, math.log(0.9), math.log(0.7)])
    h = lambda *p: -sum(x * math.log(x) for x in p)  # noqa: E731
    assert entropy[0].tolist() == pytest.approx([0.0, h(0.1, 0.9), h(0.7, 0.3)])


def test_grpo_advantages_subtract_the_group_mean():
    adv = grpo_advantages([1.0, 0.0, 0.5, 0.5, 0.2, 0.4], [2, 2, 2], std_normalize=False)
    assert adv == pytest.approx([0.5, -0.5, 0.0, 0.0, -0.1, 0.1])
    normed = grpo_advantages([1.0, 0.0], [2], std_normalize=True)
    assert normed == pytest.approx([1.0, -1.0], rel=1e-4)
    # a mix whose sources sample their prompts 3 and 1 times: each group's own mean; a group of one has none
    assert grpo_advantages([1.0, 0.0, 0.5, 0.7], [3, 1], std_normalize=False) == pytest.approx([0.5, -0.5, 0.0, 0.0])
    # an episode its environment broke (not counted) is no one's baseline and gets 0; a group of failures, all 0
    counted = [True, False, True, True, False, False]
    adv = grpo_advantages([1.0, 0.0, 0.5, 0.0, 0.0, 0.0], [4, 2], std_normalize=False, counted=counted)
    assert adv == pytest.approx([0.5, 0.0, 0.0, -0.5, 0.0, 0.0])  # the mean of 1, 0.5 and 0, not of all four


def test_a_group_tied_within_float_noise_gets_no_advantage_where_std_normalize_would_blow_the_noise_up():
    # a near-constant judge's P(yes): the 4th decimal is its server's float noise; an unrelated group still learns
    noisy, real = [0.5371, 0.5372, 0.5370, 0.5371], [0.9, 0.1, 0.5, 0.5]
    untied = grpo_advantages(noisy, [4], std_normalize=True)
    assert max(map(abs, untied)) > 1  # the noise as large as a real signal
    adv = grpo_advantages(noisy + real, [4, 4], std_normalize=True, tie_std=1e-3)
    assert adv[:4] == [0.0] * 4 and adv[4:] == pytest.approx(grpo_advantages(real, [4], std_normalize=True))


def test_batch_file_round_trip(tmp_path):
    samples = [
        Sample([1, 2], [3, 4, 5], [-0.1, -0.2, -0.3], 0.5, 0.75, streams={TEACHER_LOGPROBS: [-1.0, -2.0, -3.0]}),
        Sample([1], [6], [-0.4], -0.5, 0.25, loss_mask=[False], mode="opd", teacher="teacher"),
    ]
    path = tmp_path / "rollouts" / "step_3.bin"
    write_batch(Batch(3, 2, samples, {"reward/mean": 0.5}), path)
    back = read_batch(path)
    assert back.step == 3 and back.policy_version == 2 and back.metrics == {"reward/mean": 0.5}
    assert back.samples == samples
    assert not list(path.parent.glob("*.tmp"))


def test_a_teachers_top_k_travels_in_the_batch_file_and_lands_at_its_tokens(tmp_path):
    ids = torch.tensor([[9, 4], [3, 10]], dtype=torch.int32)  # k = 2 at each of the 2 completion tokens
    scored = Sample([7, 8], [9, 10], [-0.1, -0.2], teacher_top_ids=ids, teacher_top_logprobs=-torch.rand(2, 2))
    path = tmp_path / "step_0.bin"
    write_batch(Batch(0, 0, [scored, Sample([7], [9], [-0.3])], {}), path)
    back = read_batch(path).samples
    assert torch.equal(back[0].teacher_top_ids, ids) and back[1].teacher_top_ids is None
    tb = collate_rows([[back[1], back[0]]], pad_id=0)  # packed: the scored sample second in its row
    assert tb.teacher_top_ids[0, 4:].tolist() == ids.tolist() and not tb.teacher_top_ids[0, :4].any()
    assert torch.equal(tb.teacher_top_logprobs[0, 4:], back[0].teacher_top_logprobs)
    assert tb.has_teacher_top.tolist() == [[False, False, False, False, True, True]]  # its completion tokens
    assert collate([Sample([7], [9], [-0.3])], pad_id=0).teacher_top_ids is None


def test_a_batch_file_of_another_format_is_refused_in_one_line(tmp_path):
    path = tmp_path / "step_0.bin"
    torch.save({"step": 0, "policy_version": 0, "samples": [], "metrics": {}}, path)  # format 1: no version field
    with pytest.raises(BatchFormatError, match=f"batch of format 1, this trainer reads format {FORMAT}; fix: "):
        read_batch(path)


def test_a_sequence_level_ratio_is_each_samples_geometric_mean_with_its_own_clip():
    """GSPO: both samples share one packed row; each token carries its sample's ratio and advantage."""
    first = Sample([7], [9, 10], [math.log(0.5)] * 2, advantage=1.0)  # pi 0.6 then 0.5: ratios 1.2 and 1
    second = Sample([7], [9], [math.log(0.5)], advantage=-1.0)  # on-policy: ratio 1
    batch = collate_rows([[first, second]], pad_id=0)
    pi = [0.0, math.log(0.6), math.log(0.5), 0.0, math.log(0.5)]
    s = math.sqrt(1.2)  # the first sample's exp(mean log ratio)
    wide = LossConfig(ratio_level="sequence", seq_clip_low=0.5, seq_clip_high=1.0)
    for cfg, first_grad, clipped in ((wide, -s / 3, 0.0), (LossConfig(ratio_level="sequence"), 0.0, 2.0)):
        logprobs = torch.tensor([pi], requires_grad=True)
        loss, sums = rl_loss(logprobs, batch, cfg, total_tokens=3)
        loss.backward()
        bounded = min(s, 1 + cfg.seq_clip_high)
        assert loss.item() == pytest.approx((-2 * bounded + 1) / 3)  # -A s on each token, over the step's 3
        # every token of a sample gets its sample's weight, the on-policy one too; a clipped sample gets none
        assert logprobs.grad[0].tolist() == pytest.approx([0.0, first_grad, first_grad, 0.0, 1 / 3])
        assert sums["clipped/sequence"] == clipped


PRESETS = Path(__file__).resolve().parents[1] / "conf" / "correction"
SQRT_18 = math.sqrt(1.8)  # sample a's geometric-mean weight: its tokens' weights are 1.8 and 1
# each preset on the two samples below: (each trained token's weight on its policy term, 0 = dropped; metric sums)
CORRECTIONS = {
    "none": ([1.8, 1, 9, 1], {}),
    "band": ([0, 1, 0, 1], {"correction/masked_prob_band": 2}),  # |0.9 - 0.5| and |0.45 - 0.05| exceed 0.2
    "token_tis": ([1.8, 1, 2, 1], {"correction/truncated_token": 1}),  # b's first weight 9 truncated at 2
    "seq_tis": ([1.8, 1, 9 * 2 / 3, 2 / 3], {"correction/truncated_sequence": 2}),  # b's weight 3: scaled by 2/3
    "icepop": ([1.8, 1, 0, 1], {"correction/masked_token": 1}),  # 9 leaves [0.5, 5]
    "seq_mask_tis": ([1.8, 1, 0, 0], {"correction/masked_sequence": 2}),  # b's 3 leaves [0.5, 2]: dropped whole
}


@pytest.mark.parametrize("preset", sorted(CORRECTIONS))
def test_each_correction_preset_weighs_and_drops_tokens_as_computed_by_hand(preset):
    """Two samples packed in one row: a (advantage +1) with token weights pi/mu = 0.9/0.5 and 0.5/0.5, b (-1) with
    0.45/0.05 = 9 and 1; sequence weights sqrt(1.8) and 3. The loss is -sum A w / N and d loss / d log pi_t =
    -A_t w_t / N at each trained token (N = 4), whatever the preset; the weight metrics do not depend on it."""
    a = Sample([7], [9, 10], [math.log(0.5)] * 2, advantage=1.0, source="a")
    b = Sample([7], [11, 12], [math.log(0.05), math.log(0.5)], advantage=-1.0, source="b")
    batch = collate_rows([[a, b]], pad_id=0)
    logprobs = torch.tensor(
        [[0.0, math.log(0.9), math.log(0.5), 0.0, math.log(0.45), math.log(0.5)]], requires_grad=True
    )
    fix = CorrectionConfig(**OmegaConf.to_container(OmegaConf.load(PRESETS / f"{preset}.yaml")))
    loss, sums = rl_loss(logprobs, batch, LossConfig(correction=fix), total_tokens=4)
    loss.backward()
    weights, counts = CORRECTIONS[preset]
    advantages = [1, 1, -1, -1]
    assert loss.item() == pytest.approx(-sum(A * w for A, w in zip(advantages, weights)) / 4)
    grads = [logprobs.grad[0, t].item() for t in (1, 2, 4, 5)]
    assert grads == pytest.approx([-A * w / 4 for A, w in zip(advantages, weights)])
    levels = ("masked_prob_band", "masked_token", "masked_sequence", "truncated_token", "truncated_sequence")
    assert {k: sums[f"correction/{k}"] for k in levels} == {k: counts.get(f"correction/{k}", 0) for k in levels}
    assert sums["masked_fraction"] == weights.count(0)
    assert sums["correction/token_weight_mean"] == pytest.approx(1.8 + 1 + 9 + 1)
    assert sums["correction/token_weight_max"] == pytest.approx(9)
    assert sums["correction/sequence_weight_mean"] == pytest.approx(2 * SQRT_18 + 2 * 3)
    assert sums["correction/sequence_weight_max"] == pytest.approx(3)
    # in a mix, each source's masked share over its own tokens
    means = metric_means(sums, total_tokens=4)
    assert (
        means["masked_fraction/a"] == weights[:2].count(0) / 2
        and means["masked_fraction/b"] == weights[2:].count(0) / 2
    )


def test_the_band_preset_is_the_schemas_default_and_the_configs():
    band = OmegaConf.load(PRESETS / "band.yaml")
    assert CorrectionConfig(**OmegaConf.to_container(band)) == CorrectionConfig()
    assert compose_config([]).trainer.loss.correction == CorrectionConfig()


def test_a_weight_that_overflows_is_truncated_without_a_nan():
    """token_tis drops nothing: a token the sampler gave no probability (-9999) trains with the cap's weight 2."""
    batch = one_sequence_batch([math.log(0.5), -9999.0], advantage=1.0)
    logprobs = torch.tensor([[0.0, 0.0, math.log(0.5), math.log(0.1)]], requires_grad=True)
    loss, sums = rl_loss(logprobs, batch, loss_with(prob_band=0.0, mask_low=0.0, mask_high=0.0, truncate_at=2.0), 2)
    loss.backward()
    assert loss.item() == pytest.approx(-(1 + 2) / 2) and sums["correction/truncated_token"] == 1
    assert logprobs.grad[0].tolist() == pytest.approx([0.0, 0.0, -1 / 2, -2 / 2])


def test_collate_aligns_completion_logprobs_with_the_loss_mask():
    tb = collate([Sample([7, 8], [9, 10], [-0.1, -0.2], advantage=1.0), Sample([7], [9], [-0.3])], pad_id=0)
    assert tb.input_ids.tolist() == [[7, 8, 9, 10], [7, 9, 0, 0]]
    assert tb.loss_mask.tolist() == [[0, 0, 1, 1], [0, 1, 0, 0]]
    assert tb.inference_logprobs[0].tolist() == pytest.approx([0, 0, -0.1, -0.2])
    assert tb.advantages.tolist() == [[1.0] * 4, [0.0] * 4]
    assert tb.streams == {} and tb.has_stream == {} and tb.position_ids is None


def test_collate_decides_per_sample_the_trained_tokens_and_the_teacher_term():
    scored = Sample([7], [9, 10], [-0.1, -0.2], loss_mask=[True, False], streams={TEACHER_LOGPROBS: [-1.0, -2.0]})
    tb = collate([scored, Sample([7], [9], [-0.3])], pad_id=0)
    assert tb.loss_mask.tolist() == [[0, 1, 0], [0, 1, 0]]
    assert tb.has_stream[TEACHER_LOGPROBS].tolist() == [[True] * 3, [False] * 3]
    assert tb.streams[TEACHER_LOGPROBS].tolist() == [[0.0, -1.0, -2.0], [0.0, 0.0, 0.0]]
    # teacher advantage log p_T - log pi = -1 on the one scored, trained token; the unscored sample gets none
    logprobs = torch.zeros(2, 3, requires_grad=True)
    cfg = loss_with(prob_band=0.0, mask_high=0.0, adv_tau=0.0, teacher_tau=1.0, teacher_adv_clip=0.0)
    assert distill_center([tb], cfg) == pytest.approx(-1.0 - (-0.1))  # estimated with mu, on the scored token
    loss, sums = rl_loss(logprobs, tb, cfg, total_tokens=2, teacher_center=0.0)
    loss.backward()
    assert logprobs.grad.flatten().tolist() == pytest.approx([0.0, 1.0 / 2 * math.exp(0.1), 0.0, 0.0, 0.0, 0.0])
    assert sums["teacher_kl"] == pytest.approx(1.0)


def test_parse_completions_reads_token_ids_and_logprobs():
    data = {
        "choices": [
            {
                "index": 1,
                "text": "b",
                "token_ids": [5],
                "logprobs": {"token_logprobs": [-0.5]},
                "finish_reason": "length",
            },
            {
                "index": 0,
                "text": "a<",
                "token_ids": [4, 2],
                "logprobs": {"token_logprobs": [-0.1, -0.2]},
                "finish_reason": "stop",
            },
        ]
    }
    out = parse_completions(data)
    assert [c.token_ids for c in out] == [[4, 2], [5]]
    assert out[0].logprobs == [-0.1, -0.2] and out[0].finish_reason == "stop"
    with pytest.raises(InferenceError, match="malformed"):
        parse_completions({"choices": [{"index": 0, "text": "a"}]})


def test_parse_prompt_logprobs_takes_the_actual_token_not_the_first_key():
    choice = {
        "prompt_logprobs": [
            None,
            {"9": {"logprob": -0.1, "rank": 1}, "4": {"logprob": -2.5, "rank": 3}},  # top-1 first, actual token 4
            {"7": {"logprob": -0.3, "rank": 1}},
        ]
    }
    assert parse_prompt_logprobs(choice, [1, 4, 7]) == [None, -2.5, -0.3]
    with pytest.raises(InferenceError):
        parse_prompt_logprobs({"prompt_logprobs": None}, [1, 4, 7])


def test_parse_top_logprobs_keeps_the_k_most_likely_not_the_actual_token():
    choice = {
        "prompt_logprobs": [
            None,
            # k = 2: the actual token 4 (rank 3) came along as a third entry
            {"9": {"logprob": -0.1, "rank": 1}, "4": {"logprob": -2.5, "rank": 3}, "5": {"logprob": -2.4, "rank": 2}},
            {"7": {"logprob": -0.3, "rank": 1}, "8": {"logprob": -1.5, "rank": 2}},
        ]
    }
    top = parse_top_logprobs(choice, 2)
    assert top.ids == [[9, 5], [7, 8]] and top.logprobs == [[-0.1, -2.4], [-0.3, -1.5]]
    with pytest.raises(InferenceError, match="3 were asked for"):
        parse_top_logprobs(choice, 3)


def test_the_top_k_kl_is_a_kl_over_the_top_ids_and_one_tail_bucket():
    """By hand: teacher (0.5, 0.3, 0.2), student (0.2, 0.3, 0.5) over three tokens. Top 1 (the teacher's token 0)
    leaves two outcomes, token 0 and the tail: reverse 0.2 log(0.2/0.5) + 0.8 log(0.8/0.5), forward the other way.
    Top 3 is the whole vocabulary: the exact KL, no tail."""
    p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    log = lambda xs: with_tail(torch.tensor([[xs]]).log())  # noqa: E731  [1, 1, k + 1]
    reverse = top_k_divergence(log(q[:1]), log(p[:1]), KlDirection.reverse, 0.5).item()
    forward = top_k_divergence(log(q[:1]), log(p[:1]), KlDirection.forward, 0.5).item()
    assert reverse == pytest.approx(0.2 * math.log(0.2 / 0.5) + 0.8 * math.log(0.8 / 0.5), rel=1e-5)
    assert forward == pytest.approx(0.5 * math.log(0.5 / 0.2) + 0.5 * math.log(0.5 / 0.8), rel=1e-5)
    exact = top_k_divergence(log(q), log(p), KlDirection.reverse, 0.5).item()
    assert exact == pytest.approx(sum(b * math.log(b / a) for a, b in zip(p, q)), rel=1e-5)
    # merging outcomes never raises a KL: the top-1 value is a lower bound of the exact one
    assert 0 < reverse < exact


def by_hand(kind: str, s: list[float], t: list[float], beta: float) -> float:
    """The divergences from their definitions, in Python floats over probabilities."""
    kl = lambda p, q: sum(a * math.log(a / b) for a, b in zip(p, q))  # noqa: E731
    mix = lambda p, q, w: [w * a + (1 - w) * b for a, b in zip(p, q)]  # noqa: E731
    return {
        "jsd": beta * kl(t, mix(t, s, beta)) + (1 - beta) * kl(s, mix(t, s, beta)),
        "skew_forward": kl(t, mix(t, s, beta)),
        "skew_reverse": kl(s, mix(s, t, beta)),
    }[kind]


@pytest.mark.parametrize("kind", ["jsd", "skew_forward", "skew_reverse"])
def test_the_jsd_and_skew_divergences_and_their_gradients_are_their_definitions(kind):
    """Over a whole (small) vocabulary: each value is its definition's, for beta inside (0, 1); its gradient w.r.t. the
    student's logits is the definition's, by central differences in float64; the ends are the KLs (jsd: 0 is the
    forward KL and 1 the reverse, GKD's convention; a skew of 0 is the plain KL); the JSD is bounded by log 2."""
    teacher = torch.tensor([0.6, 0.25, 0.1, 0.05], dtype=torch.float64)
    logits = torch.tensor([0.3, -0.2, 0.9, 0.1], dtype=torch.float64, requires_grad=True)
    for beta in (0.1, 0.5, 0.9):
        value = top_k_divergence(logits.log_softmax(-1), teacher.log(), KlDirection(kind), beta)
        student = logits.softmax(-1).tolist()
        assert value.item() == pytest.approx(by_hand(kind, student, teacher.tolist(), beta), rel=1e-9)
        (grad,) = torch.autograd.grad(value, logits)
        for i in range(4):
            step = torch.zeros(4, dtype=torch.float64)
            step[i] = 1e-6
            up, down = ((logits + d).softmax(-1).tolist() for d in (step, -step))
            numeric = (by_hand(kind, up, teacher.tolist(), beta) - by_hand(kind, down, teacher.tolist(), beta)) / 2e-6
            assert grad[i].item() == pytest.approx(numeric, abs=1e-7), (beta, i)
        if kind == "jsd":
            assert 0 < value.item() <= math.log(2)
    s, t = logits.log_softmax(-1).detach(), teacher.log()
    ends = {"jsd": (0, KlDirection.forward), "skew_forward": (0, KlDirection.forward)}
    beta, plain = ends.get(kind, (0, KlDirection.reverse))
    assert top_k_divergence(s, t, KlDirection(kind), beta).item() == pytest.approx(
        top_k_divergence(s, t, plain, 0.5).item(), rel=1e-12
    )
    if kind == "jsd":
        assert top_k_divergence(s, t, KlDirection.jsd, 1).item() == pytest.approx(
            top_k_divergence(s, t, KlDirection.reverse, 0.5).item(), rel=1e-12
        )


def test_top_k_distillation_at_the_whole_vocabulary_is_the_exact_kl_with_its_gradient():
    """With k = the vocabulary, the loss is teacher_tau x the full KL(pi || p_T) per scored token over the step's
    tokens, and its gradient w.r.t. the student's logits is the full KL's; an unscored sample adds nothing."""
    torch.manual_seed(0)
    vocab, n = 6, 4
    logits = torch.randn(2, n, vocab, requires_grad=True)
    teacher = torch.randn(2, n, vocab).log_softmax(-1)
    ids = torch.arange(vocab).expand(2, n, vocab)  # the top "k" in id order: any order is the same KL
    has = torch.tensor([[True] * n, [False] * n])  # sample 1 was not scored
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 0]])
    batch = TokenBatch(
        input_ids=torch.zeros(2, n, dtype=torch.long),
        attention_mask=torch.ones(2, n, dtype=torch.long),
        loss_mask=mask,
        inference_logprobs=torch.zeros(2, n),
        advantages=torch.zeros(2, n),
        teacher_top_ids=ids,
        teacher_top_logprobs=teacher * has[..., None],
        has_teacher_top=has,
    )
    cfg = LossConfig(teacher_tau=0.5)
    student = logits.log_softmax(-1)
    loss, sums = top_k_distill(student.gather(-1, ids), student[..., 0], batch, cfg, total_tokens=5)
    loss.backward()
    got_grad, logits.grad = logits.grad, None
    student = logits.log_softmax(-1)
    full = (student.exp() * (student - teacher)).sum(-1) * mask * has
    want = 0.5 * full.sum() / 5
    want.backward()
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    torch.testing.assert_close(got_grad, logits.grad, rtol=1e-4, atol=1e-6)
    assert sums["distill/topk_kl"] == pytest.approx(full.sum().item(), rel=1e-5)
    assert sums["distill/teacher_tail"] == pytest.approx(0.0, abs=1e-5)  # the whole vocabulary: no mass outside
    entropy = -(teacher.exp() * teacher).sum(-1) * mask * has
    assert sums["distill/teacher_entropy"] == pytest.approx(entropy.sum().item(), rel=1e-5)
