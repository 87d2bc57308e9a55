"""Samples from a batch file -> padded micro-batches of tensors aligned for token_logprobs, built sample by sample."""

from dataclasses import dataclass, field

import torch

from prime_rl.protocol.batch import Sample

# vLLM sends a -inf logprob as -9999 (or -inf); floored at a probability of 4e-44, so that one such token
# cannot outweigh the whole step (an unclamped distillation advantage, the step's centre of it).
LOGPROB_FLOOR = -100.0


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # [B, T] prompt + completion, right-padded
    attention_mask: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T] 1 where a completion token trains (predicted from position t-1)
    inference_logprobs: torch.Tensor  # [B, T] mu at completion positions, 0 elsewhere
    advantages: torch.Tensor  # [B] sequence-level advantages
    streams: dict[str, torch.Tensor] = field(default_factory=dict)  # [B, T] each per-token stream, 0 where absent
    has_stream: dict[str, torch.Tensor] = field(default_factory=dict)  # [B] bool: which samples carry the stream


def collate(samples: list[Sample], pad_id: int) -> TokenBatch:
    width = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    shape = (len(samples), width)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    attn, loss_mask = torch.zeros(shape, dtype=torch.long), torch.zeros(shape, dtype=torch.long)
    mu = torch.zeros(shape)
    names = sorted({name for s in samples for name in s.streams})
    streams = {name: torch.zeros(shape) for name in names}
    has_stream = {name: torch.zeros(len(samples), dtype=torch.bool) for name in names}
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        ids[i, : p + c] = torch.tensor(s.prompt_ids + s.completion_ids)
        attn[i, : p + c] = 1
        loss_mask[i, p : p + c] = 1 if s.loss_mask is None else torch.tensor(s.loss_mask, dtype=torch.long)
        if s.inference_logprobs:
            mu[i, p : p + c] = floored(s.inference_logprobs)
        for name, values in s.streams.items():
            streams[name][i, p : p + c] = floored(values)
            has_stream[name][i] = True
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return TokenBatch(ids, attn, loss_mask, mu, advantages, streams, has_stream)


def floored(logprobs: list[float]) -> torch.Tensor:
    return torch.tensor(logprobs, dtype=torch.float32).clamp(min=LOGPROB_FLOOR)


def micro_batches(samples: list[Sample], size: int, pad_id: int) -> list[TokenBatch]:
    return [collate(samples[i : i + size], pad_id) for i in range(0, len(samples), size)]


def to_device(mb: TokenBatch, device) -> TokenBatch:
    def move(value):
        return {k: v.to(device) for k, v in value.items()} if isinstance(value, dict) else value.to(device)

    return TokenBatch(**{k: move(v) for k, v in vars(mb).items()})
