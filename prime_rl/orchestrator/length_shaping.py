"""Length shaping of single-turn replies (orchestrator.length), both from DAPO: a soft overlong penalty, which
lowers the reward of a reply linearly over its last `overlong_buffer` tokens before max_tokens, by up to
`overlong_penalty` at max_tokens; and overlong filtering, which leaves a reply cut by max_tokens in its group (its
reward still counts toward the group's mean) but trains on none of its tokens. An episode's turns are not shaped:
its length is the environment's as much as the student's."""

from prime_rl.config.schema import Config
from prime_rl.protocol.batch import Sample


def overlong_penalty(length: int, max_tokens: int, buffer: int, penalty: float) -> float:
    """What a reply of `length` tokens loses: 0 up to max_tokens - buffer, then linearly up to `penalty`."""
    start = max_tokens - buffer
    if buffer == 0 or length <= start:
        return 0.0
    return penalty * min(length - start, buffer) / buffer


def shaped_rewards(cfg: Config, samples: list[Sample], rewards: list[float]) -> tuple[list[float], dict]:
    """The rewards the advantages are computed from (each sample's own reward stays the task's), with the step's
    mean penalty; and, with mask_truncated, the cut replies' tokens out of the loss."""
    length, max_tokens = cfg.orchestrator.length, cfg.orchestrator.sampling.max_tokens
    penalties = [
        overlong_penalty(len(s.completion_ids), max_tokens, length.overlong_buffer, length.overlong_penalty)
        if s.loss_mask is None
        else 0.0
        for s in samples
    ]
    metrics = {"reward/overlong_penalty": sum(penalties) / len(penalties)} if length.overlong_buffer else {}
    if length.mask_truncated:
        cut = [s for s in samples if s.truncated and s.loss_mask is None]
        for s in cut:
            s.loss_mask = [False] * len(s.completion_ids)
        metrics["seq_len/masked_truncated"] = len(cut) / len(samples)
    return [r - p for r, p in zip(rewards, penalties)], metrics
