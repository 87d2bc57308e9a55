"""Losses over the completion tokens of one micro-batch (docs/architecture.md, "The maths").

Sums are divided by the token count of the whole step (`total_tokens`), not the micro-batch, so
gradient accumulation over micro-batches gives the same gradient as one big batch.
"""

from dataclasses import dataclass

import torch

from prime_rl.config.schema import LossConfig


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # [B, T] prompt + completion, right-padded
    attention_mask: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T] 1 where the token is a completion token (predicted from position t-1)
    inference_logprobs: torch.Tensor  # [B, T] mu at completion positions, 0 elsewhere
    advantages: torch.Tensor  # [B] sequence-level advantages
    teacher_logprobs: torch.Tensor | None = None  # [B, T] log p_T at completion positions (opd)


def distill_advantage(logprobs: torch.Tensor, batch: TokenBatch, cfg: LossConfig, center: float) -> torch.Tensor:
    """Per-token log p_T - log pi (no gradient), clamped to +-teacher_adv_clip, minus the step's mean `center`."""
    adv = (batch.teacher_logprobs - logprobs).detach()
    if cfg.teacher_adv_clip > 0:
        adv = adv.clamp(-cfg.teacher_adv_clip, cfg.teacher_adv_clip)
    return adv - center


def rl_loss(
    logprobs: torch.Tensor, batch: TokenBatch, cfg: LossConfig, total_tokens: int, teacher_center: float | None = None
):
    """Importance-weighted policy gradient with a trust-region mask; returns (loss, metric sums).
    `teacher_center`: opd's distillation term, centred on this step mean; None (rl): no teacher term."""
    mask = batch.loss_mask.float()
    log_ratio = (logprobs - batch.inference_logprobs) * mask
    ratio = log_ratio.exp()
    # A token trains only where trainer and sampler agree both in probability and in ratio: the probability band
    # alone keeps a token sampled at mu = 1e-3 that the trainer now gives 0.15, with a ratio of 150.
    off_band = ((logprobs.exp() - batch.inference_logprobs.exp()).abs() > cfg.mask_band).float() * mask
    off_ratio = ((ratio < cfg.ratio_low) | (ratio > cfg.ratio_high)).float() * mask * (1 - off_band)
    kept = mask - off_band - off_ratio
    adv = cfg.adv_tau * batch.advantages[:, None].expand_as(logprobs)
    if teacher_center is not None:
        adv = adv + cfg.teacher_tau * distill_advantage(logprobs, batch, cfg, teacher_center)
    # Selected, not multiplied by the mask: a masked token's ratio may be inf (a sampler logprob near -inf), and
    # inf * 0 would make the loss and every gradient NaN, and the whole step would be skipped.
    kept_log_ratio = torch.where(kept > 0, log_ratio, 0.0)
    per_token = -adv.detach() * kept_log_ratio.exp() + cfg.kl_tau * kept_log_ratio**2
    loss = torch.where(kept > 0, per_token, 0.0).sum() / total_tokens
    seen = log_ratio.detach().clamp(max=20)  # for the metric: a runaway token reads large, not inf
    sums = {
        "mismatch_kl": ((seen.exp() - 1 - seen) * mask).sum().item(),
        "masked_fraction": (mask - kept).sum().item(),
        "masked/prob_band": off_band.sum().item(),  # |pi - mu| > mask_band
        "masked/ratio": off_ratio.sum().item(),  # in the band, but pi/mu outside [ratio_low, ratio_high]
    }
    if teacher_center is not None:
        sums["teacher_kl"] = ((logprobs - batch.teacher_logprobs).detach() * mask).sum().item()
    return loss, sums


def sft_loss(logprobs: torch.Tensor, batch: TokenBatch, total_tokens: int):
    """Masked NLL of the completion tokens."""
    return -(logprobs * batch.loss_mask.float()).sum() / total_tokens, {}


def distill_center(batch_teacher: torch.Tensor, batch_mu: torch.Tensor, mask: torch.Tensor, cfg: LossConfig) -> float:
    """The step's mean distillation advantage, estimated with the sampler's logprobs (mu ~ pi, known up front)."""
    if not cfg.teacher_adv_center:
        return 0.0
    adv = batch_teacher - batch_mu
    if cfg.teacher_adv_clip > 0:
        adv = adv.clamp(-cfg.teacher_adv_clip, cfg.teacher_adv_clip)
    return ((adv * mask).sum() / mask.sum().clamp(min=1)).item()


def metric_means(sums: dict[str, float], total_tokens: int) -> dict[str, float]:
    return {k: v / total_tokens for k, v in sums.items()}
