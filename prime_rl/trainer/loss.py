"""Losses over the completion tokens of one micro-batch (docs/architecture.md, "The maths"), and the one each of a
run's modes trains with (`Objective`; `Mode.loss` names a `ModeLoss`): the importance-weighted policy loss, with the
scorer's term where the mode has one (a per-token advantage from the sampled token, or a KL over the scorer's top k:
trainer.loss.distill), or the NLL of teacher-written tokens.

Sums are divided by the token count of the whole step (`total_tokens`), not the micro-batch, so
gradient accumulation over micro-batches gives the same gradient as one big batch.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace

import torch

from prime_rl.config.modes import Mode, distill_top_k, import_object, mode_config, mode_named, run_modes
from prime_rl.config.schema import Config, KlDirection, LossConfig, RatioLevel
from prime_rl.config.sources import source_losses
from prime_rl.protocol.batch import TEACHER_CHUNKS, TEACHER_LOGPROBS, Sample
from prime_rl.trainer.data import LOGPROB_FLOOR, TokenBatch
from prime_rl.trainer.logprobs import Logprobs
from prime_rl.trainer.off_policy import correct, sample_mean
from prime_rl.trainer.step_metrics import source_sums

# the least tail mass a top-k distribution gets (with_tail): its log stays finite; at k = the vocabulary the tail
# is 0 but for rounding (~1e-7 in float32), which this floor keeps from adding more than ~2e-7 nats to a KL
TAIL_FLOOR = 1e-8
SOURCE_METRICS = ("mismatch_kl", "masked_fraction")  # in a mix, also per source: <name>/<label>


def teacher_logprobs(batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, T] log p_T, [B, T] 1 at the completion tokens a teacher scored): decided sample by sample, so a
    micro-batch may mix scored and unscored samples, or hold none (a rank's stand-in)."""
    if TEACHER_LOGPROBS not in batch.streams:
        nothing = torch.zeros_like(batch.inference_logprobs)
        return nothing, nothing
    scored = batch.loss_mask.float() * batch.has_stream[TEACHER_LOGPROBS]
    return batch.streams[TEACHER_LOGPROBS], scored


def teacher_chunks(batch: TokenBatch, scored: torch.Tensor) -> torch.Tensor:
    """[B, T] 1 at the first scored token of each chunk the teacher scored as one: every scored token, but for a
    teacher with another tokenizer, whose log p_T is of chunks of text (docs/cross_tokenizer.md)."""
    if TEACHER_CHUNKS not in batch.streams:
        return scored
    return torch.where(batch.has_stream[TEACHER_CHUNKS], batch.streams[TEACHER_CHUNKS], 1.0) * scored


def chunk_sums(values: torch.Tensor, batch: TokenBatch, scored: torch.Tensor) -> torch.Tensor:
    """[B, T] at each scored token, `values` summed over its chunk (the student's log pi of the chunk's text):
    `values` itself where every token is a chunk of its own, as with one tokenizer."""
    if TEACHER_CHUNKS not in batch.streams:
        return values
    chunk = teacher_chunks(batch, scored).flatten().cumsum(0).long()  # a token's chunk: the starts up to it
    sums = torch.zeros(chunk.numel() + 1, dtype=values.dtype, device=values.device)
    return sums.index_add_(0, chunk, (values * scored).flatten())[chunk].view_as(values)


def distill_advantage(logprobs: torch.Tensor, batch: TokenBatch, cfg: LossConfig, center: float) -> torch.Tensor:
    """Per-token log p_T - log pi (no gradient; of the token's chunk with a teacher of another tokenizer), clamped to
    +-teacher_adv_clip, minus the step's mean `center`; 0 where no teacher scored."""
    teacher, scored = teacher_logprobs(batch)
    adv = (teacher - chunk_sums(logprobs, batch, scored)).detach()
    if cfg.teacher_adv_clip > 0:
        adv = adv.clamp(-cfg.teacher_adv_clip, cfg.teacher_adv_clip)
    return (adv - center) * scored


def rl_loss(
    logprobs: torch.Tensor, batch: TokenBatch, cfg: LossConfig, total_tokens: int, teacher_center: float | None = None
):
    """Importance-weighted policy gradient with the run's off-policy correction (trainer/off_policy.py); returns
    (loss, metric sums). `teacher_center`: opd's distillation term, centred on this step mean; None (rl): none."""
    mask = batch.loss_mask.float()
    log_ratio = (logprobs - batch.inference_logprobs) * mask
    fix = correct(log_ratio, logprobs, batch.inference_logprobs, mask, batch.sample_ids, cfg.correction)
    kept = fix.kept
    adv = cfg.adv_tau * batch.advantages
    if teacher_center is not None:
        adv = adv + cfg.teacher_tau * distill_advantage(logprobs, batch, cfg, teacher_center)
    # Selected, not multiplied by the mask: a masked token's ratio may be inf (a sampler logprob near -inf), and
    # inf * 0 would make the loss and every gradient NaN, and the whole step would be skipped.
    kept_log_ratio = torch.where(kept > 0, log_ratio, 0.0)
    sums = {}
    if cfg.ratio_level == RatioLevel.sequence:
        policy, clipped = sequence_policy_term(kept_log_ratio, kept, adv.detach(), batch.sample_ids, cfg)
        policy = policy * fix.log_scale.exp()
        sums["clipped/sequence"] = clipped.sum().item()
    else:
        # value: the weight; gradient: the weight times grad log pi
        policy = -adv.detach() * (fix.log_weight + (kept_log_ratio - kept_log_ratio.detach())).exp()
    per_token = policy + cfg.kl_tau * kept_log_ratio**2
    loss = torch.where(kept > 0, per_token, 0.0).sum() / total_tokens
    seen = log_ratio.detach().clamp(max=20)  # for the metric: a runaway token reads large, not inf
    k3 = seen.exp() - 1 - seen
    sums |= {"mismatch_kl": (k3 * mask).sum().item(), **fix.sums}
    sums |= source_sums(batch, {name: values for name, values in zip(SOURCE_METRICS, (k3, mask - kept))}, mask)
    if teacher_center is not None:
        sums["teacher_kl"] = sampled_teacher_kl(logprobs, batch)
    return loss, sums


def sampled_teacher_kl(logprobs: torch.Tensor, batch: TokenBatch) -> float:
    """The sum of log pi - log p_T over the scored tokens (chunks): the single-sample estimate of KL(pi || p_T)."""
    teacher, scored = teacher_logprobs(batch)
    gap = (chunk_sums(logprobs, batch, scored) - teacher).detach()
    return (gap * teacher_chunks(batch, scored)).sum().item()


def sequence_policy_term(
    kept_log_ratio: torch.Tensor, kept: torch.Tensor, adv: torch.Tensor, sample_ids: torch.Tensor, cfg: LossConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO's policy term per token, in its token form (the advantage may vary along a sample, as opd's does):
    -min(s_t A_t, clip(s_t, 1 - seq_clip_low, 1 + seq_clip_high) A_t), with s_t = sg[s] pi_t / sg[pi_t], whose
    value is the sample's ratio s = exp(mean of its kept tokens' log pi/mu) and whose gradient is s grad log pi_t.
    Returns (the term, 1 at the kept tokens whose sample's ratio was clipped: they get no gradient)."""
    mean_log_ratio = sample_mean(kept_log_ratio.detach(), kept, sample_ids)
    ratio = (mean_log_ratio + kept_log_ratio - kept_log_ratio.detach()).exp()
    bounded = ratio.clamp(1 - cfg.seq_clip_low, 1 + cfg.seq_clip_high)
    # the clipped side is the one min() takes: above the band for a positive advantage, below it for a negative one
    clipped = (((ratio > bounded) & (adv > 0)) | ((ratio < bounded) & (adv < 0))).float() * kept
    return -torch.minimum(ratio * adv, bounded * adv), clipped


def sft_loss(logprobs: torch.Tensor, batch: TokenBatch, total_tokens: int):
    """Masked NLL of the completion tokens."""
    return -(logprobs * batch.loss_mask.float()).sum() / total_tokens, {}


def entropy_bonus(entropy: torch.Tensor, batch: TokenBatch, cfg: LossConfig, total_tokens: int) -> torch.Tensor:
    """-entropy_tau x the entropy of each trained token's distribution (with its gradient), over the step's tokens."""
    return -cfg.entropy_tau * (entropy * batch.loss_mask).sum() / total_tokens


def reference_kl(logprobs: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """[B, T] the k3 estimate of KL(pi || pi_ref) at each sampled token, exp(r) - r - 1 with r = log pi_ref - log pi:
    never negative, unbiased for samples of pi, its gradient through log pi."""
    r = reference - logprobs
    return torch.expm1(r) - r  # expm1: exact where the two policies are close


def distill_center(mbs: list[TokenBatch], cfg: LossConfig) -> float:
    """The step's mean distillation advantage over the tokens a teacher scored, estimated with the sampler's
    logprobs (mu ~ pi, known before the first forward pass)."""
    if not cfg.teacher_adv_center:
        return 0.0
    pairs = [teacher_logprobs(mb) for mb in mbs]
    gaps = [teacher - chunk_sums(mb.inference_logprobs, mb, scored) for (teacher, scored), mb in zip(pairs, mbs)]
    adv = torch.cat([gap.flatten() for gap in gaps])
    mask = torch.cat([scored.flatten() for _, scored in pairs])
    if cfg.teacher_adv_clip > 0:
        adv = adv.clamp(-cfg.teacher_adv_clip, cfg.teacher_adv_clip)
    return ((adv * mask).sum() / mask.sum().clamp(min=1)).item()


def top_k_distill(
    top: torch.Tensor | None, logprobs: torch.Tensor, batch: TokenBatch, cfg: LossConfig, total_tokens: int
) -> tuple[torch.Tensor, dict[str, float]]:
    """distill=topk: teacher_tau x the KL between teacher and student over the teacher's top k plus the tail, at the
    tokens a teacher scored, over the step's tokens; `top` [B, T, k] is the student's logprobs at the teacher's
    top ids (None: a micro-batch without any, which adds nothing). Returns (loss, metric sums), the sampled
    teacher_kl among them, comparable across trainer.loss.distill."""
    names = ("teacher_kl", "distill/topk_kl", "distill/teacher_tail", "distill/teacher_entropy")
    if top is None:
        return torch.zeros(()), dict.fromkeys(names, 0.0)
    scored = batch.loss_mask.float() * batch.has_teacher_top
    # an id the teacher could not list (another tokenizer's): nothing on either side, its mass in the tails
    listed = batch.teacher_top_logprobs.isfinite()
    teacher = with_tail(batch.teacher_top_logprobs.where(listed, LOGPROB_FLOOR))
    kl = top_k_divergence(with_tail(top.where(listed, LOGPROB_FLOOR)), teacher, cfg.distill_kl, cfg.distill_beta)
    kl = kl * scored
    values = (
        sampled_teacher_kl(logprobs, batch),
        kl.detach().sum().item(),
        (teacher[..., -1].exp() * scored).sum().item(),  # the teacher's mass outside its top k
        # over the k + 1 outcomes: at most the teacher's entropy, equal to it at k = the vocabulary
        (-(teacher.exp() * teacher).sum(-1) * scored).sum().item(),
    )
    return cfg.teacher_tau * kl.sum() / total_tokens, dict(zip(names, values))


def top_k_divergence(student: torch.Tensor, teacher: torch.Tensor, kind: KlDirection, beta: float) -> torch.Tensor:
    """[B, T] divergence between two distributions over k + 1 outcomes ([B, T, k + 1] logprobs of the top k ids and
    of the tail bucket of everything else, `with_tail`): a lower bound of the full one (merging outcomes never
    raises an f-divergence), equal to it when k is the vocabulary. jsd is GKD's generalized Jensen-Shannon,
    beta KL(T || M) + (1 - beta) KL(S || M) with M = beta T + (1 - beta) S, whose ends (which tend to 0) are taken
    as the two KLs, forward at 0 and reverse at 1, as GKD does; a skew KL measures against a mix of both."""
    if kind == KlDirection.reverse or (kind == KlDirection.jsd and beta == 1):
        return kl(student, teacher)
    if kind == KlDirection.forward or (kind == KlDirection.jsd and beta == 0):
        return kl(teacher, student)
    if kind == KlDirection.jsd:
        mixed = mixture(teacher, student, beta)
        return beta * kl(teacher, mixed) + (1 - beta) * kl(student, mixed)
    if kind == KlDirection.skew_forward:
        return kl(teacher, mixture(teacher, student, beta))
    return kl(student, mixture(student, teacher, beta))


def kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) over the last dim, from logprobs."""
    return (p.exp() * (p - q)).sum(-1)


def mixture(p: torch.Tensor, q: torch.Tensor, weight: float) -> torch.Tensor:
    """The logprobs of weight P + (1 - weight) Q (a weight of 0 or 1 is Q or P itself)."""
    weights = torch.tensor([weight, 1 - weight], dtype=p.dtype, device=p.device).log()
    return torch.logsumexp(torch.stack([p + weights[0], q + weights[1]]), dim=0)


def with_tail(top: torch.Tensor) -> torch.Tensor:
    """[B, T, k + 1]: the k ids' logprobs and the tail's, log(1 - their mass), summed in float64 (a top k covering
    nearly all the mass leaves a difference of nearly equal numbers) and floored at TAIL_FLOOR, where float32
    rounding decides its value."""
    mass = top.double().exp().sum(-1)
    tail = (1 - mass).clamp(min=TAIL_FLOOR).log().to(top.dtype)
    return torch.cat([top, tail[..., None]], dim=-1)


# (the micro-batch's logprobs, the micro-batch, total_tokens=the step's token count) -> (loss, metric sums)
StepLoss = Callable[[Logprobs, TokenBatch, int], tuple[torch.Tensor, dict[str, float]]]


class Objective:
    """The run's loss: each sample trains with its mode's (`Mode.loss`) and its source's loss weights (a mix's sources
    may set their own mode, adv_tau and teacher_tau); the step's samples go to micro-batches of one such part each."""

    def __init__(self, cfg: Config):
        self.cfg, self.loss_cfg = cfg, cfg.trainer.loss
        self.modes = {mode.name: mode for mode in run_modes(cfg)}
        self.default = mode_named(cfg.training_mode).name
        self.source_losses = source_losses(cfg)
        self.made: dict[tuple[str, float, float, bool], ModeLoss] = {}

    def parts(self, samples: list[Sample]) -> list[tuple["ModeLoss", list[Sample]]]:
        """The step's samples by mode (a sample without one: the run's training_mode), loss weights and whether they
        are fixed completions, in order of first appearance: the same on every rank."""
        by_part: dict[tuple[str, float, float, bool], list[Sample]] = {}
        for s in samples:
            loss = self.source_losses.get(s.source, self.loss_cfg)
            by_part.setdefault((s.mode or self.default, loss.adv_tau, loss.teacher_tau, s.off_policy), []).append(s)
        return [(self.mode_loss(*part), share) for part, share in by_part.items()]

    def mode_loss(self, mode: str, adv_tau: float, teacher_tau: float, off_policy: bool = False) -> "ModeLoss":
        key = (mode, adv_tau, teacher_tau, off_policy)
        if key not in self.made:
            loss = replace(self.loss_cfg, adv_tau=adv_tau, teacher_tau=teacher_tau)
            made = self.modes.get(mode) or mode_named(mode)  # a built-in mode's name is its spec
            kind = OffPolicyDistill if off_policy else import_object(made.loss, "training_mode", "loss")
            self.made[key] = kind(self.cfg, made, loss)
        return self.made[key]


class ModeLoss(ABC):
    """One mode's loss (`Mode.loss` names a subclass): at which temperature the trainer computes the policy, and the
    loss of each micro-batch of the mode's share of a step. Built with the mode, the loss weights of the samples it
    trains (a mix's source may set its own) and the run's config."""

    def __init__(self, cfg: Config, mode: Mode, loss: LossConfig):
        self.cfg, self.mode, self.loss_cfg = cfg, mode, loss
        self.knobs = mode_config(cfg, mode)  # its own knobs, typed (None for a mode without any)
        # pi is the policy that sampled, at its temperature (vLLM reports mu the same way, --logprobs-mode
        # processed_logprobs); teacher-written tokens are plain targets: NLL at temperature 1
        self.temperature = cfg.orchestrator.sampling.temperature if mode.trains_sampled_policy else 1.0
        self.top_k = mode.scores_tokens and bool(distill_top_k(cfg))  # the trainer computes log pi at the top k ids

    @abstractmethod
    def for_step(self, mbs: list[TokenBatch]) -> StepLoss:
        """The loss of every micro-batch of the mode's share of a step, given all of its micro-batches (before any
        rank split): a loss may need the whole step (a mean to centre on)."""


class NllLoss(ModeLoss):
    """sft: the NLL of the completion tokens."""

    def for_step(self, mbs: list[TokenBatch]) -> StepLoss:
        return lambda out, mb, total_tokens: sft_loss(out.token, mb, total_tokens)


class PolicyLoss(ModeLoss):
    """The modes that train on the student's samples: the importance-weighted policy loss, with the scorer's term
    where the mode has one (the sampled token's, centred on the step's mean, or the KL over the scorer's top k)."""

    def for_step(self, mbs: list[TokenBatch]) -> StepLoss:
        sampled = self.mode.scores_tokens and not self.top_k
        center = distill_center(mbs, self.loss_cfg) if sampled else None

        def step_loss(out: Logprobs, mb: TokenBatch, total_tokens: int):
            loss, sums = rl_loss(out.token, mb, self.loss_cfg, total_tokens, teacher_center=center)
            if not self.top_k:
                return loss, sums
            distill, distill_sums = top_k_distill(out.top, out.token, mb, self.loss_cfg, total_tokens)
            return loss + distill, sums | distill_sums

        return step_loss


class OffPolicyDistill(ModeLoss):
    """A scoring mode's fixed completions (GKD's off-policy share, modes.opd.on_policy < 1): no sampler wrote them,
    so there is no policy term, only teacher_tau x the divergence over the teacher's top k, at the mode's
    temperature."""

    def for_step(self, mbs: list[TokenBatch]) -> StepLoss:
        return lambda out, mb, total_tokens: top_k_distill(out.top, out.token, mb, self.loss_cfg, total_tokens)
