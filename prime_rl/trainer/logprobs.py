"""Each token's logprob under the trained policy, and the entropy of each next-token distribution (both with their
gradients: the entropy's for trainer.loss.entropy_tau), without an fp32 [batch, seq, vocab] tensor.

log_softmax over a 150 k vocabulary in fp32 is the largest tensor of a step: 2.4 GB for 8 x 512 positions, and
autograd would keep it for the backward pass (twice, with the entropy's). Both functions here work through the
sequence a chunk of positions at a time, keep only the log-normaliser per position, and recompute each chunk in
the backward pass:
- `head_logprobs` starts from the final hidden states and the output layer's weight, so not even the logits exist
  whole (their gradient neither): peak memory above the activations is one chunk, and the weight's gradient
  accumulates straight into its `.grad`;
- `token_logprobs` starts from logits a model returned (any model, any output layer).

Either also reports, at each position, the logprobs of a few given ids (a teacher's top-k: trainer.loss.distill),
picked from the same chunk of logits, so a top-k distillation loss costs no second pass over the vocabulary.
"""

from typing import NamedTuple

import torch

CHUNK_BYTES = 64 * 2**20  # the fp32 slice of the logits one chunk works on (memory: BENCHMARKS §7)
# on CUDA each chunk also reads and writes the whole [vocab, hidden] fp32 weight gradient: at 152 k vocab 64 MiB is
# ~110 positions a chunk, so larger chunks (not yet measured on a GPU: bench/gpu_smoke.sh)
CUDA_CHUNK_BYTES = 512 * 2**20


class Logprobs(NamedTuple):
    token: torch.Tensor  # [B, T] each token's logprob given the ones before it (position 0, without context: 0)
    entropy: torch.Tensor  # [B, T] the entropy of the distribution that predicted it
    top: torch.Tensor | None  # [B, T, k] the logprob of each of `top_ids` there (None without top_ids)


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0, top_ids: torch.Tensor | None = None
) -> Logprobs:
    """Logprobs under softmax(logits / temperature); with `top_ids` ([B, T, k] ids at each token's position, e.g. a
    teacher's most likely ones), each of their logprobs in the distribution that predicted the token there too."""
    picked, entropy = SelectedLogprobs.apply(logits[:, :-1], targets_of(input_ids, top_ids), temperature)
    return split(at_positions(picked), at_positions(entropy), top_ids)


def head_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    input_ids: torch.Tensor,
    temperature: float = 1.0,
    top_ids: torch.Tensor | None = None,
) -> Logprobs:
    """token_logprobs of the logits `hidden @ weight.T` ([B, T, H] final hidden states, [V, H] output layer),
    computed in `hidden`'s dtype a chunk at a time: the [B, T, V] logits are never built."""
    picked, entropy = HeadLogprobs.apply(hidden[:, :-1], weight, targets_of(input_ids, top_ids), temperature)
    return split(at_positions(picked), at_positions(entropy), top_ids)


def targets_of(input_ids: torch.Tensor, top_ids: torch.Tensor | None) -> torch.Tensor:
    """[B, T-1, 1 + k] the ids whose logprob each prediction (of tokens 1..) reports: the token's, then the top ids."""
    targets = input_ids[:, 1:, None]
    return targets if top_ids is None else torch.cat([targets, top_ids[:, 1:]], dim=-1)


def split(picked: torch.Tensor, entropy: torch.Tensor, top_ids: torch.Tensor | None) -> Logprobs:
    return Logprobs(picked[..., 0], entropy, None if top_ids is None else picked[..., 1:])


def at_positions(per_prediction: torch.Tensor) -> torch.Tensor:
    """[B, T-1, ...] values of the predictions of tokens 1.. as [B, T, ...] by token position (position 0: 0)."""
    return torch.cat([torch.zeros_like(per_prediction[:, :1]), per_prediction], dim=1)


def chunks(batch: int, length: int, vocab: int, device: str = "cpu") -> list[slice]:
    """Position slices whose fp32 [batch, positions, vocab] stays within the device's chunk bytes."""
    size = max(1, (CUDA_CHUNK_BYTES if device == "cuda" else CHUNK_BYTES) // (4 * batch * vocab))
    return [slice(s, min(s + size, length)) for s in range(0, length, size)]


def chunk_stats(x: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log-normaliser, logprob of each target [B, c, m], entropy) per position of fp32 logits x [B, c, V]."""
    lse = torch.logsumexp(x, dim=-1)
    picked = x.gather(-1, targets) - lse[..., None]
    # H = -sum p log p = lse - sum p x, with p = exp(x - lse); in place: one chunk-sized buffer, not three
    return lse, picked, lse - (x - lse[..., None]).exp_().mul_(x).sum(-1)


def logits_grad(
    x: torch.Tensor,
    lse: torch.Tensor,
    targets: torch.Tensor,
    grad_picked: torch.Tensor,
    entropy: torch.Tensor,
    grad_entropy: torch.Tensor | None,
) -> torch.Tensor:
    """d loss / d x for fp32 logits x [B, c, V] (overwritten): through each picked logprob [B, c, m],
    (onehot(target) - p) * d loss / d picked, and, where the loss used the entropy H, through it:
    -p * (log p + H) * d loss / d H."""
    logp = x.sub_(lse[..., None])
    through_picked = grad_picked.sum(-1, keepdim=True)
    if grad_entropy is None:
        g = logp.exp_().mul_(through_picked.neg_())
    else:
        weight = (logp + entropy[..., None]).mul_(grad_entropy[..., None]).add_(through_picked)
        g = logp.exp_().mul_(weight.neg_())
    return g.scatter_add_(-1, targets, grad_picked)


def upstream(grad_picked: torch.Tensor | None, targets: torch.Tensor) -> torch.Tensor:
    """The picked logprobs' gradient; zeros where the loss used only the entropy (autograd then passes None)."""
    return torch.zeros_like(targets, dtype=torch.float32) if grad_picked is None else grad_picked


class HeadLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature):
        w = weight.to(hidden.dtype)  # the compute dtype (autocast would cast the same way)
        picked = torch.empty(targets.shape, dtype=torch.float32, device=hidden.device)
        entropy, lse = torch.empty_like(picked[..., 0]), torch.empty_like(picked[..., 0])
        for s in chunks(*targets.shape[:2], weight.shape[0], hidden.device.type):
            x = (hidden[:, s] @ w.T).float().div_(temperature)
            lse[:, s], picked[:, s], entropy[:, s] = chunk_stats(x, targets[:, s])
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)  # an output the loss did not use gets None: no entropy gradient to add
        return picked, entropy

    @staticmethod
    def backward(ctx, grad_picked, grad_entropy):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        grad_picked = upstream(grad_picked, targets)
        w = weight.to(hidden.dtype)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = weight_grad(weight) if ctx.needs_input_grad[1] else None  # frozen (LoRA): none
        for s in chunks(*targets.shape[:2], weight.shape[0], hidden.device.type):
            h = hidden[:, s]
            x = (h @ w.T).float().div_(ctx.temperature)
            g_entropy = None if grad_entropy is None else grad_entropy[:, s]
            g = logits_grad(x, lse[:, s], targets[:, s], grad_picked[:, s], entropy[:, s], g_entropy)
            g = g.div_(ctx.temperature)
            del x  # before the next chunk-sized buffers
            grad_hidden[:, s] = g.to(hidden.dtype) @ w
            if grad_weight is not None:
                grad_weight.addmm_(g.flatten(0, 1).T.to(grad_weight.dtype), h.flatten(0, 1).to(grad_weight.dtype))
        # a parameter's gradient went straight into its .grad: autograd gets nothing to add
        return grad_hidden, None if weight.is_leaf else grad_weight, None, None


def weight_grad(weight: torch.Tensor) -> torch.Tensor:
    """Where the output weight's gradient accumulates: a parameter's own .grad, so that no second [vocab, hidden]
    buffer exists beside it (autograd would allocate one and then add it in); a fresh buffer otherwise."""
    if not weight.is_leaf:
        return torch.zeros_like(weight)
    if weight.grad is None:
        weight.grad = torch.zeros_like(weight)
    return weight.grad


class SelectedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, temperature):
        picked = torch.empty(targets.shape, dtype=torch.float32, device=logits.device)
        entropy, lse = torch.empty_like(picked[..., 0]), torch.empty_like(picked[..., 0])
        for s in chunks(*logits.shape, logits.device.type):
            lse[:, s], picked[:, s], entropy[:, s] = chunk_stats(logits[:, s].float() / temperature, targets[:, s])
        ctx.save_for_backward(logits, targets, lse, entropy)
        ctx.temperature = temperature
        ctx.set_materialize_grads(False)  # an output the loss did not use gets None: no entropy gradient to add
        return picked, entropy

    @staticmethod
    def backward(ctx, grad_picked, grad_entropy):
        logits, targets, lse, entropy = ctx.saved_tensors
        grad_picked = upstream(grad_picked, targets)
        grad = torch.empty_like(logits)
        for s in chunks(*logits.shape, logits.device.type):
            x = logits[:, s].float() / ctx.temperature
            g_entropy = None if grad_entropy is None else grad_entropy[:, s]
            g = logits_grad(x, lse[:, s], targets[:, s], grad_picked[:, s], entropy[:, s], g_entropy)
            grad[:, s] = g / ctx.temperature
        return grad, None, None
