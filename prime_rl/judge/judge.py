"""The judge of the sources with task.verifier=judge: each sample's reply (an episode's whole transcript) goes to the
judge teacher's server, a step's samples all at once (up to teacher.max_concurrency in flight, which vLLM batches),
and its answer becomes the reward (verdict.py). A request that still fails after the client's retries, or an answer
that reads as no verdict, gives the sample no reward: it trains no token and is no group's baseline (as an episode
its environment broke), and is counted (judge/failed, judge/unparsed); a batch with no verdict at all stops the run
(as the verifier's does)."""

import asyncio
import time
from dataclasses import dataclass

from prime_rl.config.schema import JudgeConfig, Verdict
from prime_rl.config.user_error import UserError
from prime_rl.inference.client import InferenceError, Sampling
from prime_rl.judge.verdict import rubric_prompt, score_reward, yes_no_reward
from prime_rl.teacher.chat_api import chat_payload


class JudgeFailed(UserError, RuntimeError):
    """The judge gave no verdict on a whole batch: it is down, or answers in no form its verdict reads."""


@dataclass
class Judged:
    prompt: str  # the task's prompt
    completion: str  # what the student wrote: a reply after its reasoning, an episode's transcript
    answer: str | None  # the reference answer, where there is one


class Judge:
    def __init__(self, cfg: JudgeConfig, teacher):
        self.cfg, self.teacher = cfg, teacher  # teacher: orchestrator.context.Teacher, whose server judges
        self.counts = dict.fromkeys(("calls", "unparsed", "failed"), 0)  # this step's
        self.seconds = 0.0

    async def rewards(self, items: list[Judged]) -> list[float | None]:
        """Each item's reward in [0, 1], or None where the judge gave none (counted). A batch of which the judge
        gives no verdict stops the run: a judge that is down, or that answers in no form its verdict reads, would
        otherwise train nothing to the end."""
        start, failed = time.monotonic(), self.counts["failed"]
        rewards = await asyncio.gather(*(self.reward(item) for item in items))
        self.seconds += time.monotonic() - start
        if items and all(r is None for r in rewards):
            down = self.counts["failed"] - failed
            raise JudgeFailed(
                f"the judge gave no verdict on any of {len(items)} replies ({down} requests failed, the first error "
                f"in the log; {len(items) - down} answers unreadable as judge.verdict={self.cfg.verdict.value}); "
                "fix: check the judge's server, or its rubric and verdict (docs/how-to/judge.md)"
            )
        return list(rewards)

    async def reward(self, item: Judged) -> float | None:
        self.counts["calls"] += 1
        try:
            reward = await self.ask(item)
        except (InferenceError, KeyError, IndexError, TypeError) as e:  # an error, or an answer of no known form
            self.counts["failed"] += 1
            if self.counts["failed"] == 1:
                print(f"judge request failed (no reward; later ones only counted): {e!r}", flush=True)
            return None
        if reward is None:
            self.counts["unparsed"] += 1
        return reward

    async def ask(self, item: Judged) -> float | None:
        t = self.teacher
        if self.cfg.verdict == Verdict.reward_model:
            conversation = [{"role": "user", "content": item.prompt}, {"role": "assistant", "content": item.completion}]
            data = await t.client.post("/classify", {"model": t.model, "messages": conversation}, root=True)
            return float(data["data"][0]["probs"][-1])
        question = [
            {"role": "user", "content": rubric_prompt(self.cfg.rubric, item.prompt, item.completion, item.answer)}
        ]
        yes_no = self.cfg.verdict == Verdict.yes_no
        # yes/no reads the first token's logprobs, which vLLM gives after temperature: at 1 they are the model's
        reading = Sampling(
            temperature=1.0 if yes_no else 0.0, top_p=1.0, max_tokens=1 if yes_no else self.cfg.max_tokens
        )
        payload = chat_payload(t.cfg, t.model, question, 1, reading, t.answers.api)
        if yes_no:
            payload |= {"logprobs": True, "top_logprobs": self.cfg.top_logprobs}
        data = await t.client.post("/chat/completions", payload)
        t.answers.count(data.get("usage") or {})
        choice = data["choices"][0]
        if yes_no:
            first = (choice.get("logprobs") or {}).get("content") or [{}]
            return yes_no_reward({e["token"]: e["logprob"] for e in first[0].get("top_logprobs", [])})
        return score_reward(choice["message"].get("content") or "", self.cfg.scale)

    def take_metrics(self) -> dict[str, float]:
        """The step's judge counts and seconds; counting starts afresh for the next step."""
        metrics = {f"judge/{k}": float(v) for k, v in self.counts.items()} | {"time/judge": self.seconds}
        self.counts, self.seconds = dict.fromkeys(self.counts, 0), 0.0
        return metrics
