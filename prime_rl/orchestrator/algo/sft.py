"""sft: the teacher writes the rollouts through its chat endpoint; they are re-tokenized where the student's chat
template puts them and trained on with NLL."""

import asyncio

from prime_rl.inference.client import ChatAnswer
from prime_rl.models.chat import answer_ids, prompt_ids
from prime_rl.orchestrator.algo.base import Algorithm
from prime_rl.orchestrator.context import Context, teacher_sampling
from prime_rl.orchestrator.prompts import step_prompts
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example
from prime_rl.teacher.answers import trained_text


class SFT(Algorithm):
    async def rollouts(self, ctx: Context, examples: list[Example]) -> tuple[list[list[Sample]], dict[str, float]]:
        """rollouts_per_example answers per prompt; also the fraction the teacher ended at its length cap."""
        n = ctx.cfg.orchestrator.rollouts_per_example
        answers = await asyncio.gather(
            *(ctx.answers.sample(ex.messages, n, teacher_sampling(ctx.cfg)) for ex in examples)
        )
        groups = [[teacher_sample(ctx, ex, a) for a in group] for ex, group in zip(examples, answers)]
        cut = [a.finish_reason == "length" for group in answers for a in group]
        return groups, {"teacher/truncated": sum(cut) / len(cut)}

    def resume(self, ctx: Context, start: int) -> None:
        """The teacher's answers go on with each prompt's next sample index (answers are cached by it)."""
        for step in range(start):
            for ex in step_prompts(ctx.cfg, ctx.task, step):
                ctx.answers.skip(ex.messages, ctx.cfg.orchestrator.rollouts_per_example)


def teacher_sample(ctx: Context, ex: Example, answer: ChatAnswer) -> Sample:
    """The teacher's answer in the student's tokens; one cut off by max_tokens is not taught as finished."""
    text = trained_text(answer, ctx.cfg.teacher.reasoning)
    completion = answer_ids(ctx.tokenizer, ex.messages, text, finished=answer.finish_reason != "length")
    mode = ctx.cfg.training_mode.value
    return Sample(prompt_ids(ctx.tokenizer, ex.messages), completion, [], mode=mode, teacher=ctx.teacher_model)
