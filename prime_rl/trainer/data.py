"""Samples from a batch file -> micro-batches of tensors aligned for token_logprobs: one sample per row, right-padded,
or whole samples packed into rows of a token budget (trainer.pack_tokens), built sample by sample."""

from dataclasses import dataclass, field

import torch

from prime_rl.protocol.batch import Sample

# vLLM sends a -inf logprob as -9999 (or -inf); floored at a probability of 4e-44, so that one such token
# cannot outweigh the whole step (an unclamped distillation advantage, the step's centre of it).
LOGPROB_FLOOR = -100.0

Row = list[Sample]  # the samples of one row of a micro-batch, end to end


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # [B, T] each row's samples (prompt + completion) end to end, right-padded
    attention_mask: torch.Tensor  # [B, T] 1 at a sample's tokens, 0 at padding
    loss_mask: torch.Tensor  # [B, T] 1 where a completion token trains (predicted from position t-1)
    inference_logprobs: torch.Tensor  # [B, T] mu at completion positions, 0 elsewhere
    advantages: torch.Tensor  # [B, T] each sample's sequence-level advantage at its tokens
    streams: dict[str, torch.Tensor] = field(default_factory=dict)  # [B, T] each per-token stream, 0 where absent
    has_stream: dict[str, torch.Tensor] = field(default_factory=dict)  # [B, T] bool: tokens of samples with the stream
    sample_ids: torch.Tensor | None = None  # [B, T] the index of a token's sample in the micro-batch (padding: n)
    position_ids: torch.Tensor | None = None  # [B, T] packed rows: each sample's positions from 0; None: unpacked
    # distill=topk: [B, T, k] the teacher's top-k ids and log p_T at completion positions (0 elsewhere; an id a
    # teacher of another tokenizer could not list: id 0, log p_T -inf), [B, T] bool at the completion tokens that
    # have any; None where no sample of the micro-batch has them
    teacher_top_ids: torch.Tensor | None = None
    teacher_top_logprobs: torch.Tensor | None = None
    has_teacher_top: torch.Tensor | None = None
    sources: tuple[str, ...] = ()  # each sample's source in a mix, by its index in sample_ids ("" outside a mix)

    def model_inputs(self) -> dict:
        """The forward pass's inputs, without a KV cache (training needs none). Packed rows go by their position ids
        alone: from where they restart, transformers keeps each sample's attention within the sample (its
        packed-sequence mask, which it builds only without a padding mask and without a cache)."""
        if self.position_ids is None:
            return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "use_cache": False}
        return {"input_ids": self.input_ids, "position_ids": self.position_ids, "use_cache": False}


def collate(samples: list[Sample], pad_id: int) -> TokenBatch:
    """One sample per row."""
    return collate_rows([[s] for s in samples], pad_id)


def collate_rows(rows: list[Row], pad_id: int) -> TokenBatch:
    """Each row's samples end to end, right-padded to the longest row; position ids where a row holds several."""
    width = max(sum(s.length for s in row) for row in rows)
    shape = (len(rows), width)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    attn, loss_mask = torch.zeros(shape, dtype=torch.long), torch.zeros(shape, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)  # padding: a position 0 each, alone in its own sequence
    mu, advantages = torch.zeros(shape), torch.zeros(shape)
    sample_ids = torch.full(shape, sum(map(len, rows)), dtype=torch.long)
    names = sorted({name for row in rows for s in row for name in s.streams})
    streams = {name: torch.zeros(shape) for name in names}
    has_stream = {name: torch.zeros(shape, dtype=torch.bool) for name in names}
    top_ids, top_logprobs, has_top = teacher_top_tensors(rows, shape)
    k = 0  # the sample's index in the micro-batch
    for i, row in enumerate(rows):
        start = 0
        for s in row:
            whole, completion = slice(start, start + s.length), slice(start + len(s.prompt_ids), start + s.length)
            ids[i, whole] = torch.tensor(s.prompt_ids + s.completion_ids)
            attn[i, whole] = 1
            sample_ids[i, whole] = k
            positions[i, whole] = torch.arange(s.length)
            advantages[i, whole] = s.advantage
            loss_mask[i, completion] = 1 if s.loss_mask is None else torch.tensor(s.loss_mask, dtype=torch.long)
            if s.inference_logprobs:
                mu[i, completion] = floored(s.inference_logprobs)
            for name, values in s.streams.items():
                streams[name][i, completion] = floored(values)
                has_stream[name][i, whole] = True
            if s.teacher_top_ids is not None:
                listed = s.teacher_top_ids >= 0  # teacher/shared_tokens.py's UNLISTED pads a position's top k
                top_ids[i, completion] = s.teacher_top_ids.long().clamp(min=0)
                top_logprobs[i, completion] = s.teacher_top_logprobs.clamp(min=LOGPROB_FLOOR).where(listed, -torch.inf)
                has_top[i, completion] = listed.any(-1)
            start, k = start + s.length, k + 1
    position_ids = positions if any(len(row) > 1 for row in rows) else None  # packed rows only
    sources = tuple(s.source for row in rows for s in row)
    tensors = (ids, attn, loss_mask, mu, advantages, streams, has_stream, sample_ids, position_ids)
    return TokenBatch(*tensors, top_ids, top_logprobs, has_top, sources)


def teacher_top_tensors(rows: list[Row], shape: tuple[int, int]) -> tuple[torch.Tensor | None, ...]:
    """Zeroed (ids [B, T, k], log p_T [B, T, k], has [B, T]) for the rows' teacher top-k; Nones where none has one."""
    k = next((s.teacher_top_ids.shape[1] for row in rows for s in row if s.teacher_top_ids is not None), 0)
    if not k:
        return None, None, None
    return torch.zeros(*shape, k, dtype=torch.long), torch.zeros(*shape, k), torch.zeros(shape, dtype=torch.bool)


def floored(logprobs: list[float]) -> torch.Tensor:
    return torch.tensor(logprobs, dtype=torch.float32).clamp(min=LOGPROB_FLOOR)


def rows_of(samples: list[Sample], pack_tokens: int) -> list[Row]:
    """One sample per row (pack_tokens 0), or the samples packed whole into rows of at most pack_tokens tokens:
    first fit, longest first (a sample longer than the budget gets a row of its own). A function of the samples
    alone, so every rank packs every share alike."""
    if not pack_tokens:
        return [[s] for s in samples]
    rows: list[Row] = []
    room: list[int] = []
    for s in sorted(samples, key=lambda s: s.length, reverse=True):  # stable: equal lengths keep their order
        fit = next((i for i, free in enumerate(room) if free >= s.length), None)
        if fit is None:
            rows.append([s])
            room.append(pack_tokens - s.length)
        else:
            rows[fit].append(s)
            room[fit] -= s.length
    return rows


def micro_batches(samples: list[Sample], size: int, pad_id: int, pack_tokens: int = 0) -> list[TokenBatch]:
    """The step's micro-batches of `size` rows each."""
    rows = rows_of(samples, pack_tokens)
    return [collate_rows(rows[i : i + size], pad_id) for i in range(0, len(rows), size)]


def to_device(mb: TokenBatch, device) -> TokenBatch:
    def move(value):
        if value is None or isinstance(value, tuple):
            return value
        return {k: v.to(device) for k, v in value.items()} if isinstance(value, dict) else value.to(device)

    return TokenBatch(**{k: move(v) for k, v in vars(mb).items()})
