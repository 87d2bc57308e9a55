"""The trainer's hold on the student server's weight-transfer routes (vLLM dev mode): the four calls vLLM's trainer
engines drive, sent with the run's server key (every route of the run's servers wants it, inference/server_auth.py;
vLLM's own HTTP client sends none). Synchronous: vLLM's engines call it from their threads."""

import os

import httpx

from prime_rl.protocol.servers import REFRESH_METHOD, SERVER_KEY_ENV


class WeightTransferError(RuntimeError):
    """A weight-transfer route refused or failed: the server may hold half an update, so the run stops."""


class ServerWeights:
    def __init__(self, root: str, timeout_s: float):
        key = os.environ.get(SERVER_KEY_ENV)
        self.root = root.rstrip("/")  # the server's own routes, outside /v1
        self.http = httpx.Client(
            headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=httpx.Timeout(timeout_s)
        )

    def workers(self) -> int:
        """The server's worker processes (tensor x pipeline x data parallel): each joins the transfer group."""
        return int(self.call("GET", "get_world_size")["world_size"])

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.call("POST", "init_weight_transfer_engine", {"init_info": init_info})

    def start_weight_update(self) -> None:
        self.call("POST", "start_weight_update")

    def update_weights(self, update_info: dict | list[dict]) -> None:
        self.call("POST", "update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        body = None if weight_version is None else {"weight_version": weight_version}
        self.call("POST", "finish_weight_update", body)

    def serve_update(self) -> None:
        """After a transfer: tied output layers refreshed (inference/weight_reload.py), the KV cache computed with
        the old weights dropped."""
        self.call("POST", "collective_rpc", {"method": REFRESH_METHOD})
        if self.call("POST", "reset_prefix_cache?reset_running_requests=true").get("success") is False:
            raise WeightTransferError(f"{self.root} could not reset its prefix cache after a weight update")

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, route: str, body: dict | None = None) -> dict:
        """One request, no retry: a transfer half done cannot be sent again."""
        try:
            resp = self.http.request(method, f"{self.root}/{route}", json=body)
        except httpx.TransportError as e:
            raise WeightTransferError(f"{method} {self.root}/{route}: {type(e).__name__}: {e}") from e
        if resp.status_code >= 400:
            raise WeightTransferError(f"{method} {self.root}/{route} -> HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
