"""Samples from a batch file -> padded micro-batches of tensors aligned for token_logprobs."""

import torch

from prime_rl.protocol.batch import Sample
from prime_rl.trainer.loss import TokenBatch

# vLLM sends a -inf logprob as -9999 (or -inf); floored at a probability of 4e-44, so that one such token
# cannot outweigh the whole step (an unclamped distillation advantage, the step's centre of it).
LOGPROB_FLOOR = -100.0


def collate(samples: list[Sample], pad_id: int) -> TokenBatch:
    width = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    shape = (len(samples), width)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    attn, loss_mask = torch.zeros(shape, dtype=torch.long), torch.zeros(shape, dtype=torch.long)
    mu, teacher = torch.zeros(shape), torch.zeros(shape)
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        ids[i, : p + c] = torch.tensor(s.prompt_ids + s.completion_ids)
        attn[i, : p + c] = 1
        loss_mask[i, p : p + c] = 1
        if s.inference_logprobs:
            mu[i, p : p + c] = torch.tensor(s.inference_logprobs).clamp(min=LOGPROB_FLOOR)
        if s.teacher_logprobs is not None:
            teacher[i, p : p + c] = torch.tensor(s.teacher_logprobs).clamp(min=LOGPROB_FLOOR)
    has_teacher = samples[0].teacher_logprobs is not None
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return TokenBatch(ids, attn, loss_mask, mu, advantages, teacher if has_teacher else None)


def micro_batches(samples: list[Sample], size: int, pad_id: int) -> list[TokenBatch]:
    return [collate(samples[i : i + size], pad_id) for i in range(0, len(samples), size)]
