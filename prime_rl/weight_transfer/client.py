"""The trainer's hold on the student servers' weight-transfer routes (vLLM dev mode): the four calls vLLM's trainer
engines drive, sent with the run's server key (every route of the run's servers wants it, inference/server_auth.py;
vLLM's own HTTP client sends none). Synchronous: vLLM's engines call it from their threads."""

import os
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from itertools import accumulate

import httpx

from prime_rl.protocol.polling import wait_until
from prime_rl.protocol.servers import REFRESH_METHOD, SERVER_KEY_ENV, serves

SERVED_POLL_S = 0.5
PROBE_TIMEOUT_S = 2.0  # one readiness probe: a node that does not answer must not outlast the wait's own bound


class WeightTransferError(RuntimeError):
    """A weight-transfer route refused or failed: the server may hold half an update, so the run stops."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status of a refused request (None: no answer, or another failure)


class ServerWeights:
    """Every student server of the run (one, or one per inference node of a multi-node job) as one: each call goes
    to every server at once, since the transfer's collectives block each until the whole group has met; each
    server's workers take the ranks after the previous server's."""

    def __init__(self, roots: list[str], timeout_s: float):
        key = os.environ.get(SERVER_KEY_ENV)
        self.roots = [root.rstrip("/") for root in roots]  # the servers' own routes, outside /v1
        self.http = httpx.Client(
            headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=httpx.Timeout(timeout_s)
        )
        self.pool = ThreadPoolExecutor(max_workers=len(self.roots))
        self.sizes: list[int] = []  # each server's workers, once asked

    def wait_served(self, timeout_s: float) -> None:
        """Until every server serves: another node's starts alongside the trainer."""
        error = f"the student servers {', '.join(self.roots)} did not all serve within {timeout_s:g} s"
        with httpx.Client(headers=self.http.headers, timeout=PROBE_TIMEOUT_S, trust_env=False) as probe:
            wait_until(lambda: all(serves(probe, root) for root in self.roots), timeout_s, SERVED_POLL_S, error)

    def workers(self) -> int:
        """The servers' worker processes (tensor x pipeline x data parallel each): each joins the transfer group."""
        self.sizes = [int(answer["world_size"]) for answer in self.each("GET", "get_world_size")]
        return sum(self.sizes)

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        offsets = accumulate(self.sizes[:-1], initial=init_info["rank_offset"])
        bodies = [{"init_info": {**init_info, "rank_offset": offset}} for offset in offsets]
        self.each("POST", "init_weight_transfer_engine", bodies)

    def start_weight_update(self) -> None:
        self.each("POST", "start_weight_update")

    def update_weights(self, update_info: dict | list[dict]) -> None:
        self.each("POST", "update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.each(
            "POST", "finish_weight_update", None if weight_version is None else {"weight_version": weight_version}
        )

    def serve_update(self) -> None:
        """After a transfer: tied output layers refreshed (inference/weight_reload.py), the KV cache computed with
        the old weights dropped."""
        self.each("POST", "collective_rpc", {"method": REFRESH_METHOD})
        for root, answer in zip(self.roots, self.each("POST", "reset_prefix_cache?reset_running_requests=true")):
            if answer.get("success") is False:
                raise WeightTransferError(f"{root} could not reset its prefix cache after a weight update")

    def close(self) -> None:
        self.pool.shutdown(wait=False)  # a request left hanging by a failed transfer is not waited for
        self.http.close()

    def each(self, method: str, route: str, body: dict | list[dict] | None = None) -> list[dict]:
        """The same request to every server at once (a list: one body per server); their answers in order."""
        bodies = body if isinstance(body, list) else [body] * len(self.roots)
        sent = [self.pool.submit(self.call, method, f"{root}/{route}", b) for root, b in zip(self.roots, bodies)]
        wait(sent, return_when=FIRST_EXCEPTION)
        if any(request.done() and request.exception() for request in sent):
            # the others may wait in a collective that will never complete: their connections go, so do they
            self.http.close()
        return [request.result() for request in sent]

    def call(self, method: str, url: str, body: dict | None) -> dict:
        """One request, no retry: a transfer half done cannot be sent again."""
        try:
            resp = self.http.request(method, url, json=body)
        except httpx.TransportError as e:
            raise WeightTransferError(f"{method} {url}: {type(e).__name__}: {e}") from e
        if resp.status_code >= 400:
            raise WeightTransferError(f"{method} {url} -> HTTP {resp.status_code}: {resp.text[:300]}", resp.status_code)
        return resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
