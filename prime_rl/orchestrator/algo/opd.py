"""opd: the student samples the rollouts as in rl; the teacher scores every sampled token (prompt logprobs), which
the trainer turns into the per-token advantage teacher_tau * (log p_T - log pi)."""

import asyncio
import time

from prime_rl.config.modes import Scorer, distill_top_k
from prime_rl.config.teachers import teaches
from prime_rl.models import student_dir, teacher_dir
from prime_rl.orchestrator.algo.rl import RL
from prime_rl.orchestrator.context import Context, Teacher
from prime_rl.orchestrator.scoring import keep_scores, scored
from prime_rl.protocol.batch import Sample
from prime_rl.teacher.scoring import (
    check_remote_scorer,
    check_same_tokenizer,
    probe_ids,
    probe_prompt_logprobs,
)


class OPD(RL):
    async def preflight(self, ctx: Context) -> None:
        """Each teacher of an opd source tokenizes like the student, and its endpoint returns prompt logprobs."""
        probe = probe_ids(ctx.tokenizer, ctx.task.train[0], ctx.cfg.inference.max_model_len)
        for t in ctx.teachers.values():
            if not teaches(ctx.cfg, t.name, lambda m: m.scorer == Scorer.teacher):
                continue
            if t.local:  # its files are the launcher's check too; its server's logprobs only this one's
                check_same_tokenizer(lambda: ctx.tokenizer, student_dir(ctx.cfg), teacher_dir(t.cfg))
                await probe_prompt_logprobs(t.client, t.model, probe)
            else:
                await check_remote_scorer(t.client, t.model, ctx.tokenizer, probe)

    async def teacher_signal(self, ctx: Context, samples: list[Sample]) -> dict[str, float]:
        """Each sample's teacher scores it (its source's), in orchestrator.requests_per_step requests per teacher,
        each retried alone."""
        start = time.monotonic()
        scored = [s for s in samples if s.trained_tokens]  # an episode its environment broke has nothing to score
        by_teacher: dict[str, list[Sample]] = {}
        for s in scored:
            by_teacher.setdefault(ctx.teacher_of(s.source).name, []).append(s)
        await asyncio.gather(*(score(ctx, ctx.teachers[name], mine) for name, mine in by_teacher.items()))
        return {"time/teacher": time.monotonic() - start}


async def score(ctx: Context, teacher: Teacher, samples: list[Sample]) -> None:
    """The teacher's logprobs of each sample's tokens (and its top k where the run distils from them)."""
    k = distill_top_k(ctx.cfg)
    pairs = [(s.prompt_ids, s.completion_ids) for s in samples]
    for s, (logprobs, top) in zip(samples, await scored(ctx, teacher.client, teacher.model, pairs, k)):
        keep_scores(s, logprobs, top, k, teacher.label)
