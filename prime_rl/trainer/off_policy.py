"""Off-policy correction between the trainer's policy pi and the sampler's mu (trainer.loss.correction,
docs/off_policy.md): which completion tokens train (the probability band; a mask on the importance weight, per
token or per sample: MIS, IcePop) and how much weight the policy term of those that do gets (TIS: the weight
truncated, per token or per sample). The weight is w = pi/mu per token, or per sample the geometric mean of its
tokens' weights, exp(mean log pi/mu) over its trained tokens."""

import math
from dataclasses import dataclass

import torch

from prime_rl.config.schema import CorrectionConfig, WeightLevel

LOG_WEIGHT_CAP = 20.0  # for the metrics: a runaway weight (mu near 0) reads e^20, not inf


@dataclass
class Correction:
    kept: torch.Tensor  # [B, T] 1 at the completion tokens that train
    log_scale: torch.Tensor  # [B, T] (no gradient) log of the policy term's factor: min(0, log C - log w)
    # [B, T] (no gradient) log of the token's weight on its policy term, log pi/mu + log_scale, 0 where dropped: a
    # token truncated at C gets log C exactly, never the difference of two large numbers
    log_weight: torch.Tensor
    sums: dict[str, float]  # the step's metric sums (docs/off_policy.md)


def sample_mean(values: torch.Tensor, weights: torch.Tensor, sample_ids: torch.Tensor) -> torch.Tensor:
    """[B, T]: at each token, the mean of `values` over the tokens of its sample where `weights` is 1 (0 for a
    sample without any), packed rows included (samples are told apart by `sample_ids`; None: a sample per row)."""
    if sample_ids is None:
        sample_ids = torch.arange(values.shape[0], device=values.device)[:, None].expand_as(values)
    ids = sample_ids.flatten()
    count = int(ids.max()) + 1
    totals = torch.zeros(count, device=ids.device).index_add_(0, ids, (values * weights).flatten())
    tokens = torch.zeros(count, device=ids.device).index_add_(0, ids, weights.flatten())
    return (totals / tokens.clamp(min=1))[ids].view_as(values)


def correct(
    log_ratio: torch.Tensor, pi: torch.Tensor, mu: torch.Tensor, mask: torch.Tensor, sample_ids: torch.Tensor,
    cfg: CorrectionConfig,
) -> Correction:  # fmt: skip
    """`log_ratio` [B, T] log pi - log mu at the trained tokens (`mask`), 0 elsewhere; `pi`, `mu` their logprobs."""
    log_ratio = log_ratio.detach()
    log_w = {
        WeightLevel.token: log_ratio,
        # the sample as it was sampled: every trained token counts, those the band drops too
        WeightLevel.sequence: sample_mean(log_ratio, mask, sample_ids),
    }
    off_band = torch.zeros_like(mask)
    if cfg.prob_band:
        off_band = ((pi.detach().exp() - mu.exp()).abs() > cfg.prob_band).float() * mask
    masked = mask_by_weight(log_w[cfg.mask_level], cfg) * mask * (1 - off_band)
    kept = mask - off_band - masked
    log_scale, truncated = torch.zeros_like(mask), torch.zeros_like(mask)
    if cfg.truncate_at:
        over = log_w[cfg.truncate_level] - math.log(cfg.truncate_at)
        truncated = (over > 0).float() * kept
        log_scale = torch.where(truncated > 0, -over, 0.0)
    log_weight = log_ratio + log_scale
    if cfg.truncate_level == WeightLevel.token and cfg.truncate_at:
        log_weight = torch.where(truncated > 0, math.log(cfg.truncate_at), log_ratio)
    log_weight = torch.where(kept > 0, log_weight, 0.0)
    sums = correction_sums(mask, kept, off_band, {cfg.mask_level: masked}, {cfg.truncate_level: truncated}, log_w)
    return Correction(kept, log_scale, log_weight, sums)


def correction_sums(
    mask: torch.Tensor, kept: torch.Tensor, off_band: torch.Tensor, masked: dict, truncated: dict, log_w: dict
) -> dict[str, float]:
    """The step's metric sums: the tokens dropped (by each mask) and truncated, per level, and the weights' sum and
    maximum over the trained tokens at both levels."""
    sums = {"masked_fraction": (mask - kept).sum().item(), "correction/masked_prob_band": off_band.sum().item()}
    for level in WeightLevel:
        w = log_w[level].clamp(max=LOG_WEIGHT_CAP).exp() * mask
        sums |= {
            f"correction/{level.value}_weight_mean": w.sum().item(),
            f"correction/{level.value}_weight_max": w.max().item() if mask.any() else 0.0,
            f"correction/masked_{level.value}": masked[level].sum().item() if level in masked else 0.0,
            f"correction/truncated_{level.value}": truncated[level].sum().item() if level in truncated else 0.0,
        }
    return sums


def mask_by_weight(log_w: torch.Tensor, cfg: CorrectionConfig) -> torch.Tensor:
    """[B, T] 1 where the weight leaves [mask_low, mask_high] (either bound 0: that side open)."""
    w = log_w.exp()  # compared as a ratio, as the band preset always was (an overflow to inf is above any bound)
    none = torch.zeros_like(w, dtype=torch.bool)
    below = w < cfg.mask_low if cfg.mask_low else none
    above = w > cfg.mask_high if cfg.mask_high else none
    return (below | above).float()
