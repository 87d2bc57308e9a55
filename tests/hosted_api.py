"""A local OpenAI-compatible endpoint that behaves like a hosted API: it enforces the documented rules of OpenAI's
reasoning models and Anthropic's OpenAI layer, rate-limits, and wants a bearer key. Behind it is a real vLLM
teacher (`upstream`), or, for tests of the client alone, a canned one-word answer."""

import json
import threading
import time
from dataclasses import dataclass, field

import httpx

from prime_rl.teacher.chat_api import PROBE_MESSAGES
from tests.http_stub import StubHandler, serve_stub, stub_url


@dataclass
class Rules:
    key: str | None = None  # requests must carry `Authorization: Bearer <key>`
    completion_tokens_only: bool = False  # OpenAI reasoning models: `max_tokens` is an HTTP 400
    default_sampling_only: bool = False  # OpenAI reasoning models: temperature / top_p other than 1 is an HTTP 400
    n: str = "any"  # "refuse": n != 1 is an HTTP 400; "ignore": one choice whatever n (Anthropic's OpenAI layer)
    rate_limit_every: int = 0  # every k-th request gets 429 with Retry-After (0: never)
    retry_after_s: float = 1.0
    reasoning: str | None = None  # returned as message.reasoning_content beside the answer
    legacy_limit: bool = False  # knows only `max_tokens`; `max_completion_tokens` is silently ignored
    latency_s: float = 0.0  # time each answer takes
    server_errors: int = 0  # the first k chat requests get an HTTP 500 (a transient fault, to retry)
    error_status: int = 500  # the status of those first k answers
    should_retry: str | None = None  # their x-should-retry header ("true", "false"; None: none sent)
    retry_after_ms: bool = False  # a rate limit names its wait in OpenAI's retry-after-ms instead of Retry-After


# the rule sets of the providers docs/concepts/teachers.md names (rate limits: the every-rule test in
# test_hosted_teachers.py)
OPENAI_REASONING = Rules(key="sk-openai-test", completion_tokens_only=True, default_sampling_only=True)
ANTHROPIC = Rules(key="sk-ant-test", n="refuse")


@dataclass
class Seen:
    requests: int = 0  # chat requests that arrived
    answered: int = 0  # chat requests answered with 200
    refused: list[str] = field(default_factory=list)  # why each HTTP 400 was given
    rate_limited: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    prompt_tokens: int = 0  # usage of the answered requests
    completion_tokens: int = 0
    bodies: list[dict] = field(default_factory=list)  # the answered requests
    log: list[tuple[dict, int, dict]] = field(default_factory=list)  # every request: (body, status, usage)
    headers: list[dict[str, str]] = field(default_factory=list)  # every chat request's headers


class HostedApi:
    def __init__(self, rules: Rules, upstream: str | None = None, upstream_model: str = "tiny-teacher"):
        self.rules, self.seen, self.lock = rules, Seen(), threading.Lock()
        api = self

        class Handler(StubHandler):
            def do_POST(self):
                body = json.loads(self.body() or b"{}")
                status, reply, headers = api.handle(self.path, dict(self.headers), body)
                with api.lock:
                    api.seen.log.append((body, status, reply.get("usage", {})))
                data = json.dumps(reply).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.upstream, self.upstream_model = upstream, upstream_model
        self.server = serve_stub(Handler)
        self.url = stub_url(self.server) + "/v1"

    def close(self) -> None:
        self.server.shutdown()

    def run_requests(self) -> list[tuple[dict, int, dict]]:
        """The requests of the run's steps: all but the launcher's probe."""
        return [entry for entry in self.seen.log if entry[0].get("messages") != PROBE_MESSAGES]

    def handle(self, path: str, headers: dict[str, str], body: dict) -> tuple[int, dict, dict]:
        if not path.endswith("/chat/completions"):
            return 404, error("not found"), {}
        with self.lock:
            self.seen.requests += 1
            k = self.seen.requests
            self.seen.in_flight += 1
            self.seen.max_in_flight = max(self.seen.max_in_flight, self.seen.in_flight)
            self.seen.headers.append(headers)
        try:
            if k <= self.rules.server_errors:
                told = {"x-should-retry": self.rules.should_retry} if self.rules.should_retry else {}
                return self.rules.error_status, error("internal server error"), told
            if self.rules.key and headers.get("Authorization") != f"Bearer {self.rules.key}":
                return 401, error("invalid x-api-key"), {}
            if self.rules.rate_limit_every and k % self.rules.rate_limit_every == 0:
                with self.lock:
                    self.seen.rate_limited += 1
                if self.rules.retry_after_ms:
                    return 429, error("rate limit exceeded"), {"retry-after-ms": f"{self.rules.retry_after_s * 1000:g}"}
                return 429, error("rate limit exceeded"), {"Retry-After": f"{self.rules.retry_after_s:g}"}
            problem = self.refusal(body)
            if problem:
                with self.lock:
                    self.seen.refused.append(problem)
                return 400, error(problem), {}
            reply = self.answer(body)
            with self.lock:
                self.seen.answered += 1
                self.seen.bodies.append(body)
                self.seen.prompt_tokens += reply["usage"]["prompt_tokens"]
                self.seen.completion_tokens += reply["usage"]["completion_tokens"]
            return 200, reply, {}
        finally:
            with self.lock:
                self.seen.in_flight -= 1

    def refusal(self, body: dict) -> str | None:
        """The provider's documented HTTP 400s, with its wording."""
        r = self.rules
        if r.completion_tokens_only and "max_tokens" in body:
            return "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens'"
        for name in ("temperature", "top_p"):
            if r.default_sampling_only and body.get(name, 1) != 1:
                return f"Unsupported value: '{name}' does not support {body[name]} with this model. Only 1 is supported"
        if r.n == "refuse" and body.get("n", 1) != 1:
            return "n: must be exactly 1"
        return None

    def answer(self, body: dict) -> dict:
        n = 1 if self.rules.n == "ignore" else body.get("n", 1)
        limit = (
            body.get("max_tokens", 16)
            if self.rules.legacy_limit
            else body.get("max_completion_tokens", body.get("max_tokens", 16))
        )
        time.sleep(self.rules.latency_s)
        if self.upstream is None:
            reply = canned(n, limit)
        else:
            forward = {k: v for k, v in body.items() if k not in ("max_completion_tokens", "model")}
            forward |= {"model": self.upstream_model, "max_tokens": limit, "n": n}
            reply = httpx.post(self.upstream + "/v1/chat/completions", json=forward, timeout=120).json()
        if self.rules.reasoning:
            for choice in reply["choices"]:
                choice["message"]["reasoning_content"] = self.rules.reasoning
        return reply


def canned(n: int, limit: int) -> dict:
    """What a model answering "OK." would send: cut to the limit in one-token steps."""
    tokens = ["OK", "."][:limit]
    choice = {
        "message": {"role": "assistant", "content": "".join(tokens)},
        "finish_reason": "length" if limit < 2 else "stop",
    }
    usage = {"prompt_tokens": 9, "completion_tokens": len(tokens), "total_tokens": 9 + len(tokens)}
    return {"choices": [choice | {"index": i} for i in range(n)], "usage": usage, "created": int(time.time())}


def error(message: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error"}}
