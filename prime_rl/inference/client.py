"""Async HTTP client for OpenAI-compatible servers (vLLM or external), with bounded retries.

Generation goes through `/v1/completions` with token-id prompts so the trainer sees exactly the tokens
the sampler saw; teacher scoring reads vLLM's prompt logprobs; chat is for external teachers.
"""

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TypeVar

import httpx

from prime_rl.config.timeouts import load_timeout_s
from prime_rl.protocol.polling import wait_until_async
from prime_rl.protocol.servers import RELOAD_METHOD

# timeout, conflict, too early, rate limit; every 5xx is retried too (Anthropic's 529: overloaded)
RETRYABLE_4XX = {408, 409, 425, 429}
MAX_BACKOFF_S = 60.0
# failures before the request reached the server: the only ones a call that changes its state is sent again after
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
MAY_STILL_RUN = "; not sent again: the server may still be loading"
T = TypeVar("T")


def retryable(status: int) -> bool:
    return status in RETRYABLE_4XX or status >= 500


def should_retry(resp: httpx.Response) -> bool:
    """Whether a failed answer is worth another try: as the server says in `x-should-retry` (OpenAI's and
    Anthropic's APIs send it, and their SDKs obey it), else by its status."""
    told = resp.headers.get("x-should-retry", "").lower()
    return told == "true" if told in ("true", "false") else retryable(resp.status_code)


class InferenceError(RuntimeError):
    """A request that failed for good (after retries, or with a non-retryable answer)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status of a refused request (None: no answer, or a malformed one)


@dataclass
class RequestStats:
    """What the client's requests met since the last `take`: what the orchestrator logs per step."""

    requests: int = 0  # HTTP requests sent, retries included
    rate_limited: int = 0  # answers that asked us to wait (429, or any retryable status with Retry-After)
    rate_limit_wait_s: float = 0.0  # seconds spent waiting those out, summed over requests

    def take(self) -> "RequestStats":
        taken = replace(self)
        self.requests, self.rate_limited, self.rate_limit_wait_s = 0, 0, 0.0
        return taken


def retry_after_s(resp: httpx.Response) -> float | None:
    """The wait a server asks for in `retry-after-ms` (OpenAI's, milliseconds: it wins) or `Retry-After` (seconds, or
    an HTTP date), None when it names none."""
    with contextlib.suppress(KeyError, ValueError):
        return max(0.0, float(resp.headers["retry-after-ms"]) / 1000)
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def backoff_s(base_s: float, attempt: int) -> float:
    """Exponential backoff with jitter: concurrent requests that failed together do not retry together."""
    return min(MAX_BACKOFF_S, base_s * 2**attempt) * random.uniform(0.5, 1.0)


@dataclass
class Completion:
    token_ids: list[int]  # sampled completion tokens
    logprobs: list[float]  # the sampler's logprob of each sampled token
    finish_reason: str | None  # "stop": ended by the model; "length": cut off by max_tokens


@dataclass
class TopLogprobs:
    """A scored sequence's top-k: at each position from 1, the k most likely token ids and their logprobs."""

    ids: list[list[int]]
    logprobs: list[list[float]]


@dataclass
class ChatAnswer:
    text: str  # the answer (message.content)
    finish_reason: str | None  # "stop": the answer ended; "length": cut off by the token limit
    reasoning: str | None = None  # thinking a reasoning model returned apart from the answer
    tool_calls: list[dict] = field(default_factory=list)  # the calls it makes (OpenAI format), where tools were given


@dataclass
class ChatReply:
    answers: list[ChatAnswer]
    usage: dict = field(default_factory=dict)  # the endpoint's `usage` (prompt_tokens, completion_tokens, …)


@dataclass
class Sampling:
    temperature: float
    top_p: float
    max_tokens: int
    stop_token_ids: tuple[int, ...] = ()  # besides the model's eos; kept in the completion like an eos


class InferenceClient:
    def __init__(
        self,
        base_url: str,
        api_key_env: str | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_concurrency: int | None = None,
        rate_limit_wait_s: float = 600.0,
    ):
        hdrs = dict(headers or {})
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
        self.base_url = base_url.rstrip("/")  # the OpenAI API base, e.g. http://host:port/v1
        self.root = self.base_url.removesuffix("/v1")  # vLLM's server endpoints (pause, reload, tokenize) live here
        self.timeout_s = timeout_s  # per request, but loads, sleep and wake: theirs grows with the weights
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.rate_limit_wait_s = rate_limit_wait_s  # per request: waits a server asks for do not use up retries
        self.slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.stats = RequestStats()
        # a server the launcher restarts in place: waited for, and brought back, before requests reach it
        # (orchestrator/server_comeback.py); None: any other server
        self.comeback = None
        self.http = httpx.AsyncClient(
            headers=hdrs, timeout=httpx.Timeout(timeout_s), limits=httpx.Limits(max_connections=256)
        )

    async def close(self) -> None:
        await self.http.aclose()

    async def wait_ready(self, timeout_s: float, poll_s: float = 0.5) -> None:
        """Wait until the server lists its models: the launcher starts the orchestrator alongside the servers,
        so that its start-up (imports, tokenizer, task) overlaps theirs."""
        error = InferenceError(f"{self.base_url} did not serve /models within {timeout_s:g} s")
        await wait_until_async(self.serves_models, timeout_s, poll_s, lambda: error)

    async def serves_models(self) -> bool:
        try:
            return (await self.http.get(self.base_url + "/models")).status_code == 200
        except httpx.TransportError:
            return False  # not listening yet

    async def serving(self) -> int:
        """The server's restarts in place so far, once it serves after the latest, brought back (0: a server that is
        not restarted in place)."""
        return await self.comeback.ready() if self.comeback else 0

    async def across_restarts(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, made again after each restart in place of the server that its failure came with (a failure with
        the server's own answer, a 4xx, came from no restart)."""
        while True:
            restarts = await self.serving()
            try:
                return await call()
            except InferenceError as e:
                answered = e.status is not None and e.status < 500
                if answered or not self.comeback or not await self.comeback.came_back(restarts):
                    raise

    async def post(
        self,
        path: str,
        payload: dict | None = None,
        params: dict | None = None,
        root: bool = False,
    ) -> dict:
        """POST to an OpenAI API path under base_url (`root`: to a vLLM server endpoint outside the API), with retries
        on connection errors, timeouts, malformed JSON, 5xx and 408/409/425/429, other 4xx fail; an answer's
        `x-should-retry` overrides its status either way; sent again after its server's restart in place.

        A retryable answer with `Retry-After` (a rate limit) is waited out as asked, with jitter, and does not
        count as a retry: a rate-limited run slows down until `rate_limit_wait_s` of waiting is used up. Calls that
        change the server's state go through `control` instead, never resent while the first may still run."""
        url = (self.root if root else self.base_url) + path
        return await self.across_restarts(lambda: self.post_retrying(url, payload, params))

    async def post_retrying(self, url: str, payload: dict | None, params: dict | None) -> dict:
        failures, limited, waited = 0, 0, 0.0
        while True:
            wait = None
            try:
                resp = await self.send(url, payload, params)
                if resp.status_code < 400:
                    return resp.json() if resp.content else {}
                if not should_retry(resp):
                    raise InferenceError(f"POST {url} -> HTTP {resp.status_code}: {resp.text[:300]}", resp.status_code)
                problem = f"HTTP {resp.status_code}: {resp.text[:200]}"
                wait = retry_after_s(resp)
                if wait is None and resp.status_code == 429:
                    wait = backoff_s(self.backoff_s, limited)  # a rate limit that names no wait
            except (httpx.TransportError, ValueError) as e:
                problem = f"{type(e).__name__}: {e}"
            if wait is not None:
                wait *= random.uniform(1.0, 1.1)  # clients told to come back at once should not all come back at once
                if waited + wait > self.rate_limit_wait_s:
                    raise InferenceError(
                        f"POST {url} still rate limited after waiting {waited:.0f} s "
                        f"(the budget is {self.rate_limit_wait_s:g} s), last: {problem}",
                        resp.status_code,
                    )
                waited, limited = waited + wait, limited + 1
                self.stats.rate_limited += 1
                self.stats.rate_limit_wait_s += wait
                await asyncio.sleep(wait)
                continue
            if failures >= self.max_retries:
                raise InferenceError(f"POST {url} failed after {failures + 1} attempts, last: {problem}")
            await asyncio.sleep(backoff_s(self.backoff_s, failures))
            failures += 1

    async def send(
        self, url: str, payload: dict | None, params: dict | None, timeout_s: float | None = None
    ) -> httpx.Response:
        """One POST (bounded by `timeout_s`, None: the client's), holding one of the `max_concurrency` slots while
        it is in flight; to a server restarted in place only once it is back."""
        await self.serving()
        self.stats.requests += 1
        timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else httpx.Timeout(timeout_s)
        async with self.slots or contextlib.nullcontext():
            return await self.http.post(url, json=payload, params=params, timeout=timeout)

    async def control(
        self, url: str, timeout_s: float, payload: dict | None = None, params: dict | None = None
    ) -> httpx.Response:
        """POST a call that changes the server's state (a reload, an adapter load, sleep, wake, a cache reset),
        bounded by `timeout_s`. Unlike `post`, a request that may have reached the server is never sent again: the
        first may still be running (a reload that outlived its timeout), and a second would run beside it; only a
        server restarted in place since runs nothing of it."""
        resp = await self.across_restarts(lambda: self.reach(url, payload, params, timeout_s))
        if resp.status_code >= 400:
            still = MAY_STILL_RUN if resp.status_code >= 500 else ""
            raise InferenceError(f"POST {url} -> HTTP {resp.status_code}: {resp.text[:300]}{still}", resp.status_code)
        return resp

    async def reach(self, url: str, payload: dict | None, params: dict | None, timeout_s: float) -> httpx.Response:
        """One POST's answer, sent again only while the connection is refused or never made."""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(backoff_s(self.backoff_s, attempt - 1))
            try:
                return await self.send(url, payload, params, timeout_s)
            except NOT_SENT as e:
                problem = f"{type(e).__name__}: {e}"
            except httpx.TimeoutException as e:
                raise InferenceError(f"POST {url}: no answer within {timeout_s:g} s{MAY_STILL_RUN}") from e
            except httpx.TransportError as e:
                raise InferenceError(f"POST {url}: {type(e).__name__} after sending: {e}{MAY_STILL_RUN}") from e
        raise InferenceError(f"POST {url} could not connect after {self.max_retries + 1} attempts, last: {problem}")

    async def complete(
        self, model: str, prompts: list[list[int]], n: int, sampling: Sampling
    ) -> list[list[Completion]]:
        """n samples for each token-id prompt, in one request, with the sampler's token ids and logprobs."""
        payload = {
            "model": model,
            "prompt": prompts,
            "n": n,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "logprobs": 0,
            "return_token_ids": True,
        }
        if sampling.stop_token_ids:
            payload["stop_token_ids"] = list(sampling.stop_token_ids)
        flat = parse_completions(await self.post("/completions", payload))
        if len(flat) != n * len(prompts):
            raise InferenceError(f"asked for {n} x {len(prompts)} completions, got {len(flat)}")
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    async def prompt_logprobs(self, model: str, sequences: list[list[int]]) -> list[list[float | None]]:
        """For each sequence, the server's logprob of every token in context (None for the first one)."""
        choices = await self.scored_choices(model, sequences, 0)
        return [parse_prompt_logprobs(c, seq) for c, seq in zip(choices, sequences)]

    async def prompt_top_logprobs(
        self, model: str, sequences: list[list[int]], k: int
    ) -> list[tuple[list[float | None], TopLogprobs]]:
        """For each sequence, prompt_logprobs' values and, in the same request, each position's top k."""
        choices = await self.scored_choices(model, sequences, k)
        return [(parse_prompt_logprobs(c, seq), parse_top_logprobs(c, k)) for c, seq in zip(choices, sequences)]

    async def scored_choices(self, model: str, sequences: list[list[int]], k: int) -> list[dict]:
        """One request scoring each sequence (vLLM's prompt_logprobs, with the top k of each position), in order."""
        payload = {"model": model, "prompt": sequences, "max_tokens": 1, "prompt_logprobs": k, "temperature": 1.0}
        data = await self.post("/completions", payload)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or len(choices) != len(sequences):
            raise InferenceError(f"expected {len(sequences)} choices with prompt_logprobs, got: {str(data)[:300]}")
        return sorted(choices, key=lambda c: c.get("index", 0))

    async def chat(self, payload: dict) -> ChatReply:
        """One /chat/completions request, its payload already fitted to the endpoint (teacher/chat_api.py)."""
        data = await self.post("/chat/completions", payload)
        try:
            choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
            answers = [parse_chat_choice(c) for c in choices]
        except (KeyError, TypeError, AttributeError) as e:
            raise InferenceError(f"malformed chat response (missing {e}): {str(data)[:300]}") from e
        usage = data.get("usage")
        return ChatReply(answers, usage if isinstance(usage, dict) else {})

    async def reload_weights(self, weights_dir: str) -> None:
        """Swap the served weights in place (vLLM dev mode), then drop the KV cache computed with the old ones.

        No /pause around it: the orchestrator, the server's only client, awaits its requests before it reloads,
        so the engine is idle, and vLLM runs the reload between two engine steps in any case. The pause cost a
        fixed 20 ms sleep plus a drain handshake, about half of each step's reload on 2 cores (BENCHMARKS.md §2).
        A request still running (one the client gave up on) is preempted by the cache reset and recomputed."""
        rpc = {"method": RELOAD_METHOD, "kwargs": {"weights_path": weights_dir}}
        await self.control(self.root + "/collective_rpc", self.load_s(Path(weights_dir)), rpc)
        await self.reset_prefix_cache()

    async def reset_prefix_cache(self) -> None:
        """Retried as any request: a second reset does what the first did."""
        reply = await self.post("/reset_prefix_cache", params={"reset_running_requests": "true"}, root=True)
        if reply.get("success") is False:
            raise InferenceError(f"{self.root} could not reset its prefix cache after a weight update")

    def load_s(self, weights: Path) -> float:
        """A load's timeout: what its weights need (config/timeouts.py), never less than any request's."""
        return max(self.timeout_s, load_timeout_s(weights))

    async def sleep(self, model_dir: Path) -> None:
        """Give the device back (vLLM sleep mode, level 1: the weights of `model_dir` to host memory, KV cache
        freed); the colocated layout's server sleeps while the trainer has the GPU."""
        await self.control(self.root + "/sleep", self.load_s(model_dir), params={"level": "1"})

    async def wake_up(self, model_dir: Path, tags: list[str] | None = None) -> None:
        """Take the device back: the weights of `model_dir` back from host memory, and the KV cache; with `tags`
        only what they name (vLLM's "weights", "kv_cache"), the rest with a later call."""
        await self.control(self.root + "/wake_up", self.load_s(model_dir), params={"tags": tags} if tags else None)

    async def load_lora(self, name: str, adapter_dir: str) -> None:
        """Load (or replace in place, under the same name) a peft adapter in vLLM."""
        payload = {"lora_name": name, "lora_path": adapter_dir, "load_inplace": True}
        await self.control(self.base_url + "/load_lora_adapter", self.load_s(Path(adapter_dir)), payload)
        await self.reset_prefix_cache()


def parse_chat_choice(choice: dict) -> ChatAnswer:
    """Reasoning models return their thinking beside the answer: vLLM and DeepSeek as `reasoning_content`,
    newer vLLM and OpenRouter as `reasoning`. A call's arguments are JSON text in the OpenAI format; an endpoint
    that sends them as an object gets them re-encoded, so every call reads alike."""
    message = choice["message"]
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    calls = [
        {"id": c.get("id") or f"call_{i}", "type": "function", "function": tool_function(c["function"])}
        for i, c in enumerate(message.get("tool_calls") or [])
    ]
    return ChatAnswer(
        message.get("content") or "",
        choice.get("finish_reason"),
        reasoning if isinstance(reasoning, str) else None,
        calls,
    )


def tool_function(function: dict) -> dict:
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return {"name": function["name"], "arguments": arguments}


def parse_completions(data: dict) -> list[Completion]:
    try:
        choices = sorted(data["choices"], key=lambda c: c["index"])
        return [
            Completion(
                token_ids=list(c["token_ids"]),
                logprobs=[float(x) for x in c["logprobs"]["token_logprobs"]],
                finish_reason=c.get("finish_reason"),
            )
            for c in choices
        ]
    except (KeyError, TypeError) as e:
        raise InferenceError(f"malformed completions response (missing {e}): {str(data)[:300]}") from e


def parse_prompt_logprobs(choice: dict, token_ids: list[int]) -> list[float | None]:
    """Pick, at each position, the entry of the token actually there (the dict also holds the top-1 token)."""
    entries = choice.get("prompt_logprobs")
    if entries is None or len(entries) != len(token_ids):
        raise InferenceError(f"endpoint returned no per-token prompt logprobs for {len(token_ids)} tokens")
    out: list[float | None] = [None]
    for tok, entry in zip(token_ids[1:], entries[1:]):
        hit = (entry or {}).get(str(tok)) or (entry or {}).get(tok)
        if hit is None:
            raise InferenceError(f"prompt_logprobs lack an entry for token id {tok}")
        out.append(float(hit["logprob"]))
    return out


def parse_top_logprobs(choice: dict, k: int) -> TopLogprobs:
    """The k most likely entries of each position from 1 (the position's own token joins them when it is not one
    of them: vLLM then sends k + 1)."""
    ids, logprobs = [], []
    for entry in choice["prompt_logprobs"][1:]:
        top = sorted(((float(e["logprob"]), int(tok)) for tok, e in (entry or {}).items()), reverse=True)[:k]
        if len(top) < k:
            raise InferenceError(f"prompt_logprobs hold {len(top)} entries at a position, {k} were asked for")
        logprobs.append([lp for lp, _ in top])
        ids.append([tok for _, tok in top])
    return TopLogprobs(ids, logprobs)
