"""Small real HTTP servers for tests that need an endpoint to misbehave on cue (a stand-in teacher, a faulty
endpoint, a flaky proxy): each is a BaseHTTPRequestHandler subclass served on a free localhost port."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
