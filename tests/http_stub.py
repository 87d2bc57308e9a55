"""Small real HTTP servers for tests that need an endpoint to misbehave on cue (a stand-in teacher, a faulty
endpoint, a flaky proxy): each is a BaseHTTPRequestHandler subclass served on a free localhost port."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


class StubHandler(BaseHTTPRequestHandler):
    def reply(self, status: int, body: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def log_message(self, *args) -> None:
        pass  # a line per request would bury the test's output


class StubServer(ThreadingHTTPServer):
    request_queue_size = 256  # a burst of concurrent requests is queued, as a real server does, not refused
    daemon_threads = True  # a handler left hanging on purpose must not block shutdown


def serve_stub(handler: type[StubHandler]) -> ThreadingHTTPServer:
    """Serve `handler` in a daemon thread; stop it with `.shutdown()`. Its root is stub_url(server)."""
    server = StubServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stub_url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


class RecordingProxy:
    """Forwards every request to a real server (`upstream`, its root URL) and keeps each POST's path and JSON body:
    what a client of that server sent it."""

    def __init__(self, upstream: str):
        self.posts: list[tuple[str, dict]] = []
        proxy = self

        class Handler(StubHandler):
            def do_GET(self):
                self.forward(httpx.get(upstream + self.path, headers=self.passed(), timeout=120))

            def do_POST(self):
                body = self.body()
                proxy.posts.append((self.path, json.loads(body or b"{}")))
                self.forward(httpx.post(upstream + self.path, content=body, headers=self.passed(), timeout=120))

            def passed(self) -> dict[str, str]:
                return {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}

            def forward(self, answer: httpx.Response) -> None:
                self.reply(answer.status_code, answer.content, answer.headers.get("content-type", "application/json"))

        self.server = serve_stub(Handler)
        self.url = stub_url(self.server)

    def close(self) -> None:
        self.server.shutdown()
