"""Every route of the run's vLLM servers answers only to the run's key.

vLLM's own key check (`--api-key`, or VLLM_API_KEY) covers only /v1 and a few other API prefixes. The dev-mode
control routes the orchestrator uses (/collective_rpc, /reset_prefix_cache, /pause, …) would stay open to anyone
who can reach the port, and multi-node servers bind 0.0.0.0. vLLM loads this middleware (`--middleware`) in
every server the launcher starts; it reads the key from the same env var and refuses any other request with
401. /health stays open: it tells nothing, and readiness probes start with it. Without a key in the
environment (a server started by hand) it lets everything through, like vLLM's own check.
"""

import hashlib
import os
import secrets

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from prime_rl.protocol.servers import SERVER_KEY_ENV

OPEN_PATHS = {"/health"}
MIDDLEWARE = f"{__name__}.RequireServerKey"  # the import path vLLM's --middleware takes


class RequireServerKey:
    """A pure ASGI middleware (no buffering of streamed responses)."""

    def __init__(self, app):
        self.app = app
        key = os.environ.get(SERVER_KEY_ENV)
        self.expected = hashlib.sha256(f"Bearer {key}".encode()).digest() if key else None

    async def __call__(self, scope, receive, send):
        if self.expected is None or scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        given = Headers(scope=scope).get("authorization", "")
        # compare digests of equal length in constant time: the key is not leaked by timing
        if not secrets.compare_digest(hashlib.sha256(given.encode()).digest(), self.expected):
            return await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
        return await self.app(scope, receive, send)
