"""The middleware every vLLM server of a run loads: all routes need the run's key, /health stays open.
(tests/test_faults.py checks it on a real server of a real run.)"""

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from prime_rl.inference.server_auth import RequireServerKey
from prime_rl.protocol.servers import SERVER_KEY_ENV


def app() -> Starlette:
    ok = lambda request: PlainTextResponse("ok")  # noqa: E731
    paths = ["/health", "/collective_rpc", "/reset_prefix_cache", "/v1/models"]
    server = Starlette(routes=[Route(p, ok, methods=["GET", "POST"]) for p in paths])
    server.add_middleware(RequireServerKey)
    return server


def test_every_route_but_health_needs_the_key(monkeypatch):
    monkeypatch.setenv(SERVER_KEY_ENV, "run-key")
    client = TestClient(app())
    for path in ["/collective_rpc", "/reset_prefix_cache", "/v1/models"]:
        assert client.post(path).status_code == 401
        assert client.post(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.post(path, headers={"Authorization": "Bearer run-key"}).status_code == 200
    assert client.get("/health").status_code == 200


@pytest.mark.parametrize("key", [None, ""])
def test_a_server_without_a_key_is_open(monkeypatch, key):
    if key is None:
        monkeypatch.delenv(SERVER_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(SERVER_KEY_ENV, key)
    assert TestClient(app()).post("/collective_rpc").status_code == 200
