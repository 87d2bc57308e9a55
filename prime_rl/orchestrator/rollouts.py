"""The student's rollouts of a list of examples (a step's, or an eval's), in groups of n per example, in order: one
sampled reply each, or, for an example that carries an environment (task=gym), an episode (orchestrator/episodes.py);
and their rewards: an episode's from its environment, a reply's from the task's verifier processes."""

import asyncio
from collections.abc import Awaitable, Callable

from prime_rl.config.modes import example_mode
from prime_rl.config.sources import source_rollouts
from prime_rl.inference.client import Sampling
from prime_rl.judge.judge import Judged
from prime_rl.models.chat import prompt_ids
from prime_rl.orchestrator.context import Context, completion_text
from prime_rl.orchestrator.episodes import play_episodes
from prime_rl.orchestrator.students import sample_groups
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example

Groups = list[list[Sample]]


async def student_rollouts(
    ctx: Context, examples: list[Example], n: int, sampling: Sampling
) -> tuple[Groups, dict[str, float]]:
    """n samples of each example, the replies and the episodes made concurrently; the metrics of making them."""
    return await by_kind(
        examples,
        lambda replies: single_turn(ctx, replies, n, sampling),
        lambda episodes: play_episodes(ctx, episodes, n, sampling),
    )


async def by_rollouts(
    ctx: Context, examples: list[Example], make: Callable[[list[Example], int], Awaitable[tuple[Groups, dict]]]
) -> tuple[Groups, dict[str, float]]:
    """The groups of the examples, each of its source's rollouts_per_example samples: `make(share, n)` for the
    examples of each n, concurrently, back in the examples' order; a metric both report, weighted by prompts."""
    per_source = source_rollouts(ctx.cfg)
    ns = [per_source[ex.source] for ex in examples]
    shares = {n: [ex for ex, m in zip(examples, ns) if m == n] for n in dict.fromkeys(ns)}
    made = await asyncio.gather(*(make(share, n) for n, share in shares.items()))
    each = {n: iter(groups) for n, (groups, _) in zip(shares, made)}
    return [next(each[n]) for n in ns], weighted_means([(m, len(s)) for s, (_, m) in zip(shares.values(), made)])


def weighted_means(parts: list[tuple[dict[str, float], int]]) -> dict[str, float]:
    """Each metric's mean over the parts that report it, weighted by the parts' sizes."""
    totals: dict[str, float] = {}
    weights: dict[str, int] = {}
    for metrics, size in parts:
        for key, value in metrics.items():
            totals[key] = totals.get(key, 0.0) + value * size
            weights[key] = weights.get(key, 0) + size
    return {key: totals[key] / weights[key] for key in totals if weights[key]}


async def by_kind(
    examples: list[Example],
    replies: Callable[[list[Example]], Awaitable[tuple[Groups, dict]]],
    episodes: Callable[[list[Example]], Awaitable[tuple[Groups, dict]]],
) -> tuple[Groups, dict[str, float]]:
    """The groups of the examples without an environment (`replies`) and of those with one (`episodes`), made
    concurrently, back in the examples' order; both's metrics."""
    played = [ex.env is not None for ex in examples]
    (single, single_metrics), (multi, multi_metrics) = await asyncio.gather(
        replies([ex for ex, p in zip(examples, played) if not p]),
        episodes([ex for ex, p in zip(examples, played) if p]),
    )
    each_reply, each_episode = iter(single), iter(multi)
    return [next(each_episode if p else each_reply) for p in played], {**single_metrics, **multi_metrics}


async def single_turn(ctx: Context, examples: list[Example], n: int, sampling: Sampling) -> tuple[Groups, dict]:
    """In orchestrator.requests_per_step requests of whole groups; also the fraction cut off by max_tokens."""
    if not examples:
        return [], {}
    prompts = [prompt_ids(ctx.tokenizer, ex.messages) for ex in examples]
    # No per-request seed: vLLM would give every prompt of the request the same random stream.
    groups = await sample_groups(
        ctx.student, ctx.student_model, prompts, n, sampling, ctx.cfg.orchestrator.requests_per_step
    )
    modes = [example_mode(ctx.cfg, ex).name for ex in examples]
    samples = [
        [Sample(p, c.token_ids, c.logprobs, mode=mode, truncated=c.finish_reason == "length") for c in group]
        for p, mode, group in zip(prompts, modes, groups)
    ]
    cut = [s.truncated for group in samples for s in group]
    return samples, {"seq_len/truncated": sum(cut) / len(cut)}


async def rewards_of(ctx: Context, examples: list[Example], groups: Groups) -> list[float]:
    """Every sample's reward, in order: what the judge gives its reply or episode (a judged source's), what its
    episode earned, or what the verifier gives its reply. A sample the judge gives none trains nothing, as an
    episode its environment broke."""
    samples = [(s, ex) for ex, group in zip(examples, groups) for s in group if not s.failed]
    judged = [(s, ex) for s, ex in samples if ex.source in ctx.judged]
    pending = [(s, ex) for s, ex in samples if s.reward is None and ex.source not in ctx.judged]
    items = [
        Judged(prompt_text(ctx, s, ex), completion_text(ctx, s.completion_ids), ex.answer or None) for s, ex in judged
    ]
    verdicts, scored = await judged_and_verified(
        ctx, items, [(completion_text(ctx, s.completion_ids), ex) for s, ex in pending]
    )
    for (s, _), reward in zip(pending, scored):
        s.reward = reward
    for (s, _), verdict in zip(judged, verdicts):
        if verdict is None:
            s.failed, s.loss_mask = True, [False] * len(s.completion_ids)
        s.reward = verdict or 0.0
    return [s.reward for group in groups for s in group]


async def reply_rewards(ctx: Context, replies: list[tuple[str, Example]]) -> list[float]:
    """The rewards of replies that are not the run's samples (the teacher's, for its level): the judge's for a judged
    source's (0 where it gives none), the verifier's for the rest."""
    judged = [i for i, (_, ex) in enumerate(replies) if ex.source in ctx.judged]
    rest = [i for i, (_, ex) in enumerate(replies) if ex.source not in ctx.judged]
    verdicts, scored = await judged_and_verified(
        ctx,
        [Judged(ex.prompt, text, ex.answer or None) for text, ex in (replies[i] for i in judged)],
        [replies[i] for i in rest],
    )
    rewards = dict(zip(judged, (v or 0.0 for v in verdicts))) | dict(zip(rest, scored))
    return [rewards[i] for i in range(len(replies))]


async def judged_and_verified(
    ctx: Context, judged: list[Judged], verified: list[tuple[str, Example]]
) -> tuple[list[float | None], list[float]]:
    """The judge's verdicts (None: it gave none) and the verifier's rewards, asked at once."""
    return await asyncio.gather(
        ctx.judge.rewards(judged) if judged else asyncio.sleep(0, []),
        ctx.verification.rewards(verified) if verified else asyncio.sleep(0, []),
    )


def prompt_text(ctx: Context, s: Sample, ex: Example) -> str:
    """The prompt a judge is shown: the example's, or an episode's first prompt as the student saw it (its
    environment's first observation, after any system message), markup dropped."""
    return ex.prompt or ctx.tokenizer.decode(s.prompt_ids, skip_special_tokens=True)
