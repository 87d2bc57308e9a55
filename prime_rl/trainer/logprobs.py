"""Each token's logprob under the trained policy, and the entropy of each next-token distribution, from the
model's logits without an fp32 [batch, seq, vocab] tensor.

log_softmax over a 150 k vocabulary in fp32 is the largest tensor of a step: 2.4 GB for 8 x 512 positions, and
autograd would keep it for the backward pass (twice, with the entropy's). Here the forward pass works through the
sequence a chunk at a time, keeping only the log-normaliser per position, and the backward pass recomputes each
chunk's softmax from the logits the model returned anyway. Peak memory above the logits: one fp32 chunk.
"""

import torch

CHUNK_BYTES = 64 * 2**20  # the fp32 slice of the logits one chunk works on


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, T] logprob of each token given the ones before it, [B, T] entropy of the distribution that predicted it)
    under softmax(logits / temperature); position 0, which has no context, gets 0 in both. Entropy has no gradient."""
    picked, entropy = SelectedLogprobs.apply(logits[:, :-1], input_ids[:, 1:], temperature)
    pad = torch.nn.functional.pad
    return pad(picked, (1, 0)), pad(entropy, (1, 0))


def chunks(logits: torch.Tensor):
    """Position slices of [B, T, V] whose fp32 copy stays within CHUNK_BYTES."""
    batch, length, vocab = logits.shape
    size = max(1, CHUNK_BYTES // (4 * batch * vocab))
    return [slice(s, min(s + size, length)) for s in range(0, length, size)]


class SelectedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, temperature):
        picked = torch.empty(targets.shape, dtype=torch.float32, device=logits.device)
        entropy, lse = torch.empty_like(picked), torch.empty_like(picked)
        for s in chunks(logits):
            x = logits[:, s].float() / temperature
            lse[:, s] = torch.logsumexp(x, dim=-1)
            picked[:, s] = x.gather(-1, targets[:, s, None]).squeeze(-1) - lse[:, s]
            # H = -sum p log p = lse - sum p x, with p = exp(x - lse)
            entropy[:, s] = lse[:, s] - (torch.exp(x - lse[:, s, None]) * x).sum(-1)
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return picked, entropy

    @staticmethod
    def backward(ctx, grad_picked, _):
        logits, targets, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for s in chunks(logits):
            # d picked / d x = onehot(target) - softmax(x), and x = logits / temperature
            g = torch.exp(logits[:, s].float() / ctx.temperature - lse[:, s, None]) * -grad_picked[:, s, None]
            g.scatter_add_(-1, targets[:, s, None], grad_picked[:, s, None])
            grad[:, s] = g / ctx.temperature
        return grad, None, None
