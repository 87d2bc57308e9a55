"""Who scores a sample's tokens, in one place: a server asked for its prompt logprobs of a context followed by the
sample's completion. The scorer is the mode's (config/modes.py Scorer): a teacher's server (opd) or the student's
own, shown the example's answer; the served reference of trainer.loss.kl_ref_from=vllm scores the same way."""

import asyncio

import torch

from prime_rl.orchestrator.context import Context
from prime_rl.orchestrator.students import even_shares
from prime_rl.protocol.batch import TEACHER_LOGPROBS, Sample
from prime_rl.teacher.scoring import teacher_logprobs


async def scored(ctx: Context, client, model: str, pairs: list[tuple[list[int], list[int]]], k: int = 0) -> list:
    """(logprobs, top k or None) of each (context, completion)'s completion tokens under the server `client` serves
    `model` on, in orchestrator.requests_per_step concurrent requests."""
    shares = even_shares(pairs, ctx.cfg.orchestrator.requests_per_step)
    replies = await asyncio.gather(*(teacher_logprobs(client, model, share, k) for share in shares))
    return [one for reply in replies for one in reply]


def keep_scores(s: Sample, logprobs: list[float], top, k: int, scorer: str) -> None:
    """A sample's scorer's logprobs (and its top k, where the run distils from them) as the trainer reads them."""
    s.streams[TEACHER_LOGPROBS] = logprobs
    s.teacher = scorer
    if top is not None:
        s.teacher_top_ids = torch.tensor(top.ids, dtype=torch.int32).view(-1, k)
        s.teacher_top_logprobs = torch.tensor(top.logprobs, dtype=torch.float32).view(-1, k)
