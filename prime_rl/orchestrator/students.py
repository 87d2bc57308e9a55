"""The student servers the orchestrator samples from: one, or one per inference node in a multi-node job
(`inference.urls`), used as one server."""

import asyncio
from typing import Union

from prime_rl.config.schema import Config
from prime_rl.config.timeouts import student_request_timeout_s
from prime_rl.inference.client import Completion, InferenceClient, Sampling
from prime_rl.inference.server_urls import configured_student_urls
from prime_rl.protocol.servers import SERVER_KEY_ENV


def student_client(cfg: Config) -> Union[InferenceClient, "StudentServers"]:
    """A client of the student server, or of all of them when the multi-node plan listed several (`cfg` with the
    servers located: inference/server_urls.py)."""
    urls = configured_student_urls(cfg)
    timeout_s, retries = student_request_timeout_s(cfg), cfg.orchestrator.max_retries
    clients = [
        InferenceClient(url, api_key_env=SERVER_KEY_ENV, timeout_s=timeout_s, max_retries=retries) for url in urls
    ]
    return clients[0] if len(clients) == 1 else StudentServers(clients)


def even_shares(items: list, k: int) -> list[list]:
    """`items` cut into at most k contiguous, non-empty shares whose sizes differ by at most one."""
    k = min(k, len(items))
    return [items[i * len(items) // k : (i + 1) * len(items) // k] for i in range(k)]


async def sample_groups(
    student: Union[InferenceClient, "StudentServers"],
    model: str,
    prompts: list[list[int]],
    n: int,
    sampling: Sampling,
    requests: int,
) -> list[list[Completion]]:
    """n samples for each prompt, sent as `requests` concurrent requests of whole groups. Each request is retried
    on its own, so a slow or failed one resends its share of the step, not the step."""
    shares = even_shares(prompts, requests)
    replies = await asyncio.gather(*(student.complete(model, share, n, sampling) for share in shares))
    return [group for reply in replies for group in reply]


class StudentServers:
    """The client calls the orchestrator makes, over several servers of the same policy: a request's prompts
    are split between the servers, and every server reloads the weights before sampling goes on."""

    comeback = None  # a multi-node job's servers are never restarted in place (config/layout.py restarts_in_place)

    def __init__(self, clients: list[InferenceClient]):
        self.clients = clients
        self.base_url = ", ".join(c.base_url for c in clients)
        self.calls = 0  # rotates which server gets the first share: one-prompt requests spread evenly

    async def complete(
        self, model: str, prompts: list[list[int]], n: int, sampling: Sampling
    ) -> list[list[Completion]]:
        first, self.calls = self.calls % len(self.clients), self.calls + 1
        return await self.split(lambda c, share: c.complete(model, share, n, sampling), prompts, first)

    async def prompt_logprobs(self, model: str, sequences: list[list[int]]) -> list[list[float | None]]:
        return await self.split(lambda c, share: c.prompt_logprobs(model, share), sequences)

    async def prompt_top_logprobs(self, model: str, sequences: list[list[int]], k: int) -> list:
        return await self.split(lambda c, share: c.prompt_top_logprobs(model, share, k), sequences)

    async def split(self, ask, items: list, first: int = 0) -> list:
        """`ask(client, share)` of each server for its share of `items` (the first share to server `first`), the
        answers in the items' order."""
        clients = self.clients[first:] + self.clients[:first]
        parts = await asyncio.gather(*(ask(c, share) for c, share in zip(clients, even_shares(items, len(clients)))))
        return [one for part in parts for one in part]

    async def wait_ready(self, timeout_s: float) -> None:
        await asyncio.gather(*(c.wait_ready(timeout_s) for c in self.clients))

    async def reload_weights(self, weights_dir: str) -> None:
        await asyncio.gather(*(c.reload_weights(weights_dir) for c in self.clients))

    async def load_lora(self, name: str, adapter_dir: str) -> None:
        await asyncio.gather(*(c.load_lora(name, adapter_dir) for c in self.clients))

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.clients))
