"""Who scores a sample's tokens, in one place: a server asked for its prompt logprobs of a context followed by the
sample's completion. The scorer is the mode's (config/modes.py Scorer): a teacher's server (opd) or the student's
own, shown the example's answer; the served reference of trainer.loss.kl_ref_from=vllm scores the same way."""

import asyncio

import torch

from prime_rl.orchestrator.context import Context
from prime_rl.orchestrator.students import even_shares
from prime_rl.protocol.batch import TEACHER_LOGPROBS, Sample
from prime_rl.teacher.score_store import ScoreStore
from prime_rl.teacher.scoring import teacher_logprobs

Pair = tuple[list[int], list[int]]  # a context's token ids and a completion's


async def scored(
    ctx: Context, client, model: str, pairs: list[Pair], k: int = 0, store: ScoreStore | None = None
) -> list:
    """(logprobs, top k or None) of each (context, completion)'s completion tokens under the server `client` serves
    `model` on, in orchestrator.requests_per_step concurrent requests; with a teacher's `store`, only what it does
    not hold is asked for, each sequence once (the same reply sampled twice), and the answers are kept in it."""
    if store is None:
        return await asked(ctx, client, model, pairs, k)
    found = [store.get(model, pair, k) for pair in pairs]
    missing = {sequence_key(pair): pair for pair, score in zip(pairs, found) if score is None}
    answers = dict(zip(missing, await asked(ctx, client, model, list(missing.values()), k)))
    for key, score in answers.items():
        store.put(model, missing[key], k, score)
    store.counts.hits += len(pairs) - len(missing)
    store.counts.misses += len(missing)
    return [score if score is not None else answers[sequence_key(pair)] for pair, score in zip(pairs, found)]


async def asked(ctx: Context, client, model: str, pairs: list[Pair], k: int) -> list:
    shares = even_shares(pairs, ctx.cfg.orchestrator.requests_per_step)
    replies = await asyncio.gather(*(teacher_logprobs(client, model, share, k) for share in shares))
    return [one for reply in replies for one in reply]


def sequence_key(pair: Pair) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(pair[0]), tuple(pair[1])


def keep_scores(s: Sample, logprobs: list[float], top, k: int, scorer: str) -> None:
    """A sample's scorer's logprobs (and its top k, where the run distils from them) as the trainer reads them."""
    s.streams[TEACHER_LOGPROBS] = logprobs
    s.teacher = scorer
    if top is not None:
        s.teacher_top_ids = torch.tensor(top.ids, dtype=torch.int32).view(-1, k)
        s.teacher_top_logprobs = torch.tensor(top.logprobs, dtype=torch.float32).view(-1, k)
