"""sft's episodes (task=gym): the teacher plays the assistant through its chat endpoint, the environment answers,
and the student trains on the teacher's turns.

Each turn the teacher gets the conversation so far as messages, with the environment's tools as OpenAI `tools`
(a local vLLM teacher reads its calls with task.tool_parser), and its reply's calls come back as `tool_calls`,
answered by `tool` messages with the calls' ids. The student's tokens are built turn by turn as in the student's own
episodes (orchestrator/episodes.py): each reply tokenized where the student's chat template puts it (its calls in
the student's own call format), the turns between replies bridged, only the teacher's replies trained; a reply cut
by the teacher's token limit is not taught as finished. The episodes of a step go at their own pace, each turn one
request, answers cached like sft's single-turn answers (teacher/answers.py). The limits, failures and metrics are the
student episodes': task.max_turns, the student's context, env/*.
"""

import asyncio

from prime_rl.inference.client import ChatAnswer, Sampling
from prime_rl.models.chat import answer_ids
from prime_rl.orchestrator.context import Context, Teacher, teacher_sampling
from prime_rl.orchestrator.episodes import Episode, context_limit, fail, finished, start, take_turn
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example
from prime_rl.teacher.answers import trained_text


async def teacher_episodes(
    ctx: Context, examples: list[Example], n: int, temperature: float | None = None
) -> tuple[list[list[Sample]], dict[str, float]]:
    """n episodes of each example (one group each), played by its source's teacher at its sampling (at
    `temperature`, where given); their samples and metrics."""
    if not examples:
        return [], {}
    teachers = [ctx.teacher_of(ex.source) for ex in examples]
    groups = [[Episode(ex) for _ in range(n)] for ex in examples]
    await asyncio.gather(
        *(play(ctx, t, e, teacher_sampling(t.cfg, temperature)) for t, group in zip(teachers, groups) for e in group)
    )
    return finished(ctx, groups, teachers=[t.label for t in teachers])


async def play(ctx: Context, teacher: Teacher, e: Episode, sampling: Sampling) -> None:
    limit = context_limit(ctx)
    await start(ctx, e, limit - sampling.max_tokens)
    while e.end is None:
        [reply] = await teacher.answers.sample(e.messages, 1, sampling, e.schemas)
        message = assistant_message(teacher, reply)
        try:
            ids = answer_ids(ctx.tokenizer, e.messages, message, reply.finish_reason != "length", e.schemas)
        except Exception as error:  # a student template that refuses the turn
            fail(ctx.envs, e, error)
            return
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in reply.tool_calls] if e.tools else []
        await take_turn(ctx, e, ids, [], message, calls or None, limit, sampling.max_tokens)


def assistant_message(teacher: Teacher, reply: ChatAnswer) -> dict:
    """The teacher's reply as the conversation holds it: its text as the student learns it, and its calls."""
    message = {"role": "assistant", "content": trained_text(reply, teacher.cfg.teacher.reasoning)}
    return message | {"tool_calls": reply.tool_calls} if reply.tool_calls else message
