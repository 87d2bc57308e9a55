"""sft: the teacher writes the rollouts through its chat endpoint (replies, or whole episodes where the task has an
environment: orchestrator/teacher_episodes.py); they are re-tokenized where the student's chat template puts them
and trained on with NLL."""

import asyncio

from prime_rl.config.modes import RolloutSource, example_mode
from prime_rl.config.sources import source_rollouts
from prime_rl.inference.client import ChatAnswer
from prime_rl.models.chat import answer_ids, prompt_ids
from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.context import Context, Teacher, teacher_sampling
from prime_rl.orchestrator.prompts import step_prompts
from prime_rl.orchestrator.rollouts import by_kind, by_rollouts
from prime_rl.orchestrator.teacher_episodes import teacher_episodes
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example
from prime_rl.teacher.answers import trained_text


class SFT(Algorithm):
    async def rollouts(self, ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], dict[str, float]]:
        return await by_rollouts(
            ctx,
            examples,
            lambda share, n: by_kind(
                share,
                lambda replies: teacher_replies(ctx, replies, n),
                lambda episodes: teacher_episodes(ctx, episodes, n),
            ),
        )

    def resume(self, ctx: Context, start: int) -> None:
        """Each teacher's answers go on with each of its prompts' next sample index (answers are cached by it). An
        episode's conversations come from its environment as it is played: a resumed run asks for their answers
        from index 0 again (the cache gives back the answers the run had)."""
        per_source = source_rollouts(ctx.cfg)
        for step in range(start):
            for ex in step_prompts(ctx.cfg, ctx.task, step):
                if ex.env is None and example_mode(ctx.cfg, ex).rollouts == RolloutSource.teacher:
                    teacher = ctx.teacher_of(ex.source)
                    teacher.answers.skip(teacher.sees(ex).messages, per_source[ex.source])


async def teacher_replies(ctx: Context, examples: list[Example], n: int) -> tuple[list[list[Sample]], dict]:
    """n answers per prompt, each from its source's teacher; also the fraction cut at the teacher's length cap."""
    if not examples:
        return [], {}
    teachers = [ctx.teacher_of(ex.source) for ex in examples]
    answers = await asyncio.gather(
        *(t.answers.sample(t.sees(ex).messages, n, teacher_sampling(t.cfg)) for t, ex in zip(teachers, examples))
    )
    groups = [[teacher_sample(ctx, t, ex, a) for a in group] for t, ex, group in zip(teachers, examples, answers)]
    cut = [a.finish_reason == "length" for group in answers for a in group]
    return groups, {"teacher/truncated": sum(cut) / len(cut)}


def teacher_sample(ctx: Context, teacher: Teacher, ex: Example, answer: ChatAnswer) -> Sample:
    """The teacher's answer in the student's tokens; one cut off by max_tokens is not taught as finished."""
    text = trained_text(answer, teacher.cfg.teacher.reasoning)
    completion = answer_ids(ctx.tokenizer, ex.messages, text, finished=answer.finish_reason != "length")
    mode = example_mode(ctx.cfg, ex).name
    return Sample(prompt_ids(ctx.tokenizer, ex.messages), completion, [], mode=mode, teacher=teacher.label)
