"""The teacher's answers to a conversation (sft's rollouts, the teacher's eval): from the cache where it has them,
else from the endpoint in requests it accepts, with usage and cost counted per step."""

import asyncio
import json
from collections import Counter

from prime_rl.config.schema import Config, ReasoningMode, TeacherApiConfig
from prime_rl.inference.client import ChatAnswer, InferenceClient, InferenceError, Sampling
from prime_rl.models.chat import final_answer
from prime_rl.teacher.cache import TeacherCache
from prime_rl.teacher.chat_api import chat_payload
from prime_rl.teacher.usage import Usage, run_totals


class TeacherAnswers:
    def __init__(self, cfg: Config, client: InferenceClient, model: str, api: TeacherApiConfig):
        self.cfg, self.client, self.model, self.api = cfg, client, model, api
        self.cache = TeacherCache.of(cfg)
        self.taken: Counter[str] = Counter()  # answers taken per conversation: the next one's sample index
        self.usage = Usage()  # this step's
        self.totals: dict[str, float] = {}  # the run's, up to the last step

    def skip(self, messages: list[dict], n: int) -> None:
        """A resumed run: count the answers the steps before `start` took, so sample indices go on."""
        self.taken[conversation_key(messages)] += n

    async def sample(
        self, messages: list[dict], n: int, sampling: Sampling, tools: list[dict] | None = None
    ) -> list[ChatAnswer]:
        """The conversation's next n answers. The k-th answer a run takes for a conversation is its sample k:
        a repeated prompt gets new answers, and a rerun with the same prompts finds the same ones in the cache.
        `tools`: the JSON schemas of the tools the teacher may call (an episode's)."""
        key = conversation_key(messages)
        first = self.taken[key]
        self.taken[key] += n
        return await self.answers_at(messages, list(range(first, first + n)), sampling, tools)

    async def answers_at(
        self, messages: list[dict], indices: list[int], sampling: Sampling, tools: list[dict] | None = None
    ) -> list[ChatAnswer]:
        questions = {i: self.question(messages, sampling, i, tools) for i in indices}
        found = {i: self.cache.get("answers", q) for i, q in questions.items()} if self.cache else {}
        answers = {i: ChatAnswer(**a) for i, a in found.items() if a}
        self.usage.cache_hits += len(answers)
        missing = [i for i in indices if i not in answers]
        for i, answer in zip(missing, await self.request(messages, len(missing), sampling, tools) if missing else []):
            answers[i] = answer
            if self.cache:
                self.cache.put("answers", questions[i], answer.__dict__)
        return [answers[i] for i in indices]

    def question(self, messages: list[dict], sampling: Sampling, index: int, tools: list[dict] | None) -> dict:
        extra = self.cfg.teacher.extra_body
        question = {
            "model": self.model,
            "messages": messages,
            "sampling": {k: getattr(sampling, k) for k in ("temperature", "top_p", "max_tokens")},  # what is sent
            "extra": extra,
            "index": index,
        }
        return question | {"tools": tools} if tools else question  # without tools: the keys answers had before

    async def request(
        self, messages: list[dict], n: int, sampling: Sampling, tools: list[dict] | None = None
    ) -> list[ChatAnswer]:
        """n answers: in one request where the endpoint takes n > 1, else fanned out into n requests of one. A
        reply with fewer choices than asked is followed by a request for the rest."""
        if not self.api.multiple_choices:
            replies = await asyncio.gather(*(self.chat(messages, 1, sampling, tools) for _ in range(n)))
            return [a for reply in replies for a in reply[:1]]
        answers: list[ChatAnswer] = []
        while len(answers) < n:
            got = await self.chat(messages, n - len(answers), sampling, tools)
            if not got:
                raise InferenceError(f"teacher endpoint {self.client.base_url} returned no choices")
            answers += got[: n - len(answers)]
        return answers

    async def chat(
        self, messages: list[dict], n: int, sampling: Sampling, tools: list[dict] | None = None
    ) -> list[ChatAnswer]:
        reply = await self.client.chat(chat_payload(self.cfg, self.model, messages, n, sampling, self.api, tools))
        self.count(reply.usage)
        return reply.answers

    def count(self, usage: dict) -> None:
        """A reply's tokens and cost in this step's usage (its chat answers', and the judge's verdicts')."""
        t = self.cfg.teacher
        self.usage.add_reply(usage, t.price_per_mtok_in, t.price_per_mtok_out)

    def step_metrics(self) -> dict[str, float]:
        """The step's teacher usage and the run's totals; counting starts afresh for the next step."""
        self.usage.add_requests(self.client.stats.take())
        t = self.cfg.teacher
        priced = t.price_per_mtok_in > 0 or t.price_per_mtok_out > 0
        step, self.usage = self.usage, Usage()
        self.totals = run_totals(step, self.totals, priced)
        return step.metrics(priced) | self.totals


def conversation_key(messages: list[dict]) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def trained_text(answer: ChatAnswer, reasoning: ReasoningMode) -> str:
    """What the student learns from an answer. drop: the answer alone (a <think> block left at the start of the
    content is cut too); keep: the reasoning before the answer, as <think>…</think> (Qwen3, DeepSeek-R1)."""
    if reasoning == ReasoningMode.drop:
        return final_answer(answer.text)
    if answer.reasoning:
        return f"<think>\n{answer.reasoning.strip()}\n</think>\n\n{answer.text}"
    return answer.text
