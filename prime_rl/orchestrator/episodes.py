"""Multi-turn episodes: the student plays examples that carry an environment (task=gym) turn by turn.

Each turn's prompt is token ids: the previous prompt, the ids the student sampled, then the end of its turn and the
messages that answer it, with the generation prompt (models/chat.py next_turn_ids). A reply is never re-tokenized,
so the trainer sees exactly the ids the server sampled; only they train (the loss mask), the rest is context. A
reply that calls the environment's tools is answered by their results as tool messages (orchestrator/
tool_calls.py), any other by the environment's step(). The live episodes of a step advance together: each turn is
orchestrator.requests_per_step requests of one sample per episode (their histories differ). An episode ends when
the environment says so, after task.max_turns replies, or when a whole reply (sampling.max_tokens) would no
longer fit the context.

An environment that raises, overruns task.env_timeout_s or breaks the API ends its episode with reward 0 and no
token trained (env/errors, env/timeouts; orchestrator/env_pool.py); a step in which every episode failed stops the
run.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from prime_rl.config.modes import context_margin, example_mode
from prime_rl.config.user_error import UserError
from prime_rl.inference.client import Completion, Sampling
from prime_rl.models.chat import final_answer, next_turn_ids, prompt_ids, turn_end_ids
from prime_rl.orchestrator.context import Context, completion_text
from prime_rl.orchestrator.env_pool import EnvPool, call_in_thread
from prime_rl.orchestrator.students import sample_groups
from prime_rl.orchestrator.tool_calls import UNREADABLE, Call, answer, tool_reader
from prime_rl.protocol.batch import Sample
from prime_rl.tasks import Example
from prime_rl.tasks.gym_env import outcome_of, tool_schemas

ENDS = ("done", "max_turns", "context")  # how an episode ends by the rules (env/end/<why>: fractions)
FAILURES = ("error", "timeout")  # how an environment's failure ends it (env/errors, env/timeouts: counts)


class EnvFailed(UserError, RuntimeError):
    """Every episode of a step failed: the environment is broken."""


@dataclass
class Episode:
    example: Example
    env: object = None
    messages: list[dict] = field(default_factory=list)  # the conversation as text: the environment's view of it
    prompt_ids: list[int] = field(default_factory=list)  # the first prompt
    ids: list[int] = field(default_factory=list)  # everything after it: replies and the environment's turns
    mask: list[bool] = field(default_factory=list)  # per id: sampled by the student (trains) or not
    logprobs: list[float] = field(default_factory=list)  # the sampler's logprob per id (0 for the environment's)
    tools: dict[str, Callable] = field(default_factory=dict)  # the environment's tools, by name
    schemas: list[dict] | None = None  # their JSON schemas, which the chat template lists (None: no tools)
    reward: float = 0.0  # the environment's rewards, summed
    turns: int = 0  # replies so far
    tool_calls: int = 0  # calls the student made
    tool_errors: int = 0  # of them, the ones answered `invalid tool call` or `tool error`
    end: str | None = None  # one of ENDS or FAILURES once it is over

    @property
    def prompt(self) -> list[int]:
        return self.prompt_ids + self.ids

    def sample(self, mode: str, teacher: str | None = None) -> Sample:
        failed = self.end in FAILURES
        mask = [False] * len(self.ids) if failed else self.mask  # an episode the environment broke teaches nothing
        return Sample(
            self.prompt_ids,
            self.ids,
            [] if teacher else self.logprobs,  # a teacher's replies were not sampled in the student's tokens
            reward=0.0 if failed else self.reward,
            loss_mask=None if all(mask) else mask,
            mode=mode,
            teacher=teacher,
            failed=failed,
        )


async def play_episodes(
    ctx: Context, examples: list[Example], n: int, sampling: Sampling
) -> tuple[list[list[Sample]], dict[str, float]]:
    """n episodes of each example (one group each), played turn by turn together; their samples and metrics."""
    if not examples:
        return [], {}
    groups = [[Episode(ex) for _ in range(n)] for ex in examples]
    episodes = [e for group in groups for e in group]
    limit = context_limit(ctx)
    await asyncio.gather(*(start(ctx, e, limit - sampling.max_tokens) for e in episodes))
    live = [e for e in episodes if e.end is None]
    while live:
        replies = await sample_turn(ctx, live, sampling)
        await asyncio.gather(*(advance(ctx, e, c, limit, sampling.max_tokens) for e, c in zip(live, replies)))
        live = [e for e in live if e.end is None]
    return finished(ctx, groups)


def context_limit(ctx: Context) -> int:
    """The tokens an episode may hold: the student server's context."""
    return ctx.cfg.inference.max_model_len - context_margin(ctx.cfg)


def finished(ctx: Context, groups: list[list[Episode]], teachers: list[str] | None = None):
    """The groups' samples and the step's episode metrics, once every episode is over (their environments back
    in the pool); `teachers`: per group, the teacher that played it, where one did."""
    episodes = [e for group in groups for e in group]
    for e in episodes:
        ctx.envs.release(e.example.env, e.env)
    if all(e.end in FAILURES for e in episodes):
        raise EnvFailed(f"every one of {len(episodes)} episodes failed in its environment (see the log)")
    metrics = episode_metrics(episodes)
    for label in ctx.task.weights:  # a mix: each source's own, in the steps that drew it
        mine = [e for e in episodes if e.example.source == label]
        if mine:
            metrics.update({f"env/{label}/{k.removeprefix('env/')}": v for k, v in episode_metrics(mine).items()})
    played_by = teachers or [None] * len(groups)
    samples = [
        [e.sample(example_mode(ctx.cfg, e.example).name, teacher) for e in group]
        for group, teacher in zip(groups, played_by)
    ]
    if ctx.conversations is not None:
        for group, made in zip(groups, samples):
            ctx.conversations.update((id(s), (e.messages, e.schemas)) for e, s in zip(group, made))
    return samples, metrics


async def start(ctx: Context, e: Episode, longest_prompt: int) -> None:
    """The episode's environment (reused or made) reset to the example's seed: its first prompt."""
    try:
        e.env, observation = await ctx.envs.reset(e.example.env)
        e.schemas = tool_schemas(e.env) or None
        e.messages = [*e.example.messages[:-1], {"role": "user", "content": observation}]  # after a system prompt
        e.prompt_ids = prompt_ids(ctx.tokenizer, e.messages, e.schemas)  # a template may refuse what it is given
    except Exception as error:
        fail(ctx.envs, e, error)
        return
    e.tools = {tool.__name__: tool for tool in getattr(e.env, "tools", None) or []}
    if len(e.prompt_ids) > longest_prompt:  # no room for a whole reply
        e.end = "context"


def fail(pool: EnvPool, e: Episode, error: BaseException) -> None:
    e.end = "timeout" if isinstance(error, TimeoutError) else "error"
    e.env = None  # a broken or still-running environment is never reused
    pool.report(error)


async def sample_turn(ctx: Context, live: list[Episode], sampling: Sampling) -> list[Completion]:
    """One reply per live episode, in orchestrator.requests_per_step concurrent requests."""
    prompts = [e.prompt for e in live]
    requests = ctx.cfg.orchestrator.requests_per_step
    return [group[0] for group in await sample_groups(ctx.student, ctx.student_model, prompts, 1, sampling, requests)]


async def advance(ctx: Context, e: Episode, reply: Completion, limit: int, max_tokens: int) -> None:
    """The student's sampled reply joins the episode (its ids as sampled, never re-tokenized)."""
    message = {"role": "assistant", "content": completion_text(ctx, reply.token_ids)}
    try:
        calls = read_calls(ctx, e, reply.token_ids)
    except Exception as error:  # a tool parser that breaks on the reply
        fail(ctx.envs, e, error)
        return
    await take_turn(ctx, e, reply.token_ids, reply.logprobs, message, calls, limit, max_tokens)


async def take_turn(
    ctx: Context,
    e: Episode,
    reply: list[int],
    logprobs: list[float],
    message: dict,
    calls: list[Call] | None,
    limit: int,
    max_tokens: int,
) -> None:
    """A reply (`reply`: its ids, `message`: as the environment and a chat endpoint read it) joins the episode; the
    tools or the environment answer it; the episode ends or gets its next prompt."""
    e.ids += reply
    e.mask += [True] * len(reply)
    e.logprobs += logprobs
    e.turns += 1
    try:
        following = await respond(ctx, e, calls, message)
        if following is None:
            return
        bridge = next_turn_ids(ctx.tokenizer, e.messages, following, reply, e.schemas)
    except Exception as error:
        fail(ctx.envs, e, error)
        return
    e.messages += [message, *following]
    if len(e.prompt) + len(bridge) + max_tokens > limit:
        e.end = "context"
        return
    e.ids += bridge
    e.mask += [False] * len(bridge)
    e.logprobs += [0.0] * len(bridge)


async def respond(ctx: Context, e: Episode, calls: list[Call] | None, message: dict) -> list[dict] | None:
    """The messages that answer a reply: a tool message per call it makes, else the environment's next message;
    None when the episode is over (the environment says so, or that was its last reply: then no tool runs)."""
    spec = e.example.env
    last = e.turns >= spec.max_turns
    if calls is not None:
        if last:
            e.end = "max_turns"
            return None
        answers = [await answer(call, e.tools, spec.timeout_s) for call in calls] or [UNREADABLE]
        e.tool_calls += len(answers)
        e.tool_errors += sum(invalid for _, invalid in answers)
        # a chat endpoint's calls carry ids, which its API wants back on their results
        ids = [c["id"] for c in message.get("tool_calls", [])] or [None] * len(answers)
        return [tool_message(content, i) for (content, _), i in zip(answers, ids)]
    text = final_answer(message["content"])  # a teacher's reasoning, kept for the student, is not the action
    observation, reward, done = await call_in_thread(lambda: outcome_of(e.env.step(text)), spec.timeout_s)
    e.reward += reward
    if done or last:
        e.end = "done" if done else "max_turns"
        return None
    return [{"role": "user", "content": observation}]


def tool_message(content: str, call_id: str | None) -> dict:
    return {"role": "tool", "content": content} | ({"tool_call_id": call_id} if call_id else {})


def read_calls(ctx: Context, e: Episode, reply: list[int]) -> list[Call] | None:
    """The reply's tool calls (None: it makes none, or the environment has no tools), read from its text with
    special tokens kept (a model's call tags may be special tokens, as vLLM's own parsers expect) and without its
    end of turn."""
    if not e.tools:
        return None
    reader = tool_reader(ctx.tool_readers, e.example.env.tool_parser, ctx.tokenizer)
    ends = turn_end_ids(ctx.tokenizer)
    return reader.calls(ctx.tokenizer.decode([t for t in reply if t not in ends], skip_special_tokens=False))


def episode_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Per step: turns per episode, the tokens the student sampled and the environment's, how the episodes
    ended (fractions), and the environment's failures (counts)."""
    n = len(episodes)
    sampled = sum(sum(e.mask) for e in episodes)
    metrics = {
        "env/turns": sum(e.turns for e in episodes) / n,
        "env/sampled_tokens": sampled / n,
        "env/env_tokens": sum(len(e.ids) for e in episodes) / n - sampled / n,
        "env/tool_calls": sum(e.tool_calls for e in episodes) / n,
        "env/tool_errors": sum(e.tool_errors for e in episodes) / n,
        "env/errors": float(sum(e.end == "error" for e in episodes)),
        "env/timeouts": float(sum(e.end == "timeout" for e in episodes)),
    }
    metrics.update({f"env/end/{why}": sum(e.end == why for e in episodes) / n for why in ENDS})
    return metrics
