"""Servers' /health asked from a thread while the run goes on, each every PROBE_S: how many probes in a row each has
missed. The head of a multi-node job watches the other nodes' servers (remote_servers.py: a node dead or cut off);
every launcher watches its own (server_restarts.py: a server that hangs)."""

import threading

import httpx

from prime_rl.protocol.servers import answers_health

PROBE_S = 5.0  # how often each server is asked for /health
PROBE_TIMEOUT_S = 2.0  # one probe's wait: a server that does not answer within it missed the probe


class HealthWatch:
    def __init__(self, name: str):
        self.watched: dict[str, tuple[str, object]] = {}  # by name: its root, and a token of this watch of it
        self.missed: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.watch, name=name, daemon=True)

    def add(self, name: str, root: str) -> None:
        """Watch `root` under `name` from now on, with no probe missed yet (also a server started again)."""
        with self.lock:
            self.watched[name], self.missed[name] = (root, object()), 0
        if not self.thread.is_alive() and not self.stopped.is_set():
            self.thread.start()

    def drop(self, name: str) -> None:
        with self.lock:
            self.watched.pop(name, None)
            self.missed.pop(name, None)

    def missed_in_a_row(self, name: str) -> int:
        with self.lock:
            return self.missed.get(name, 0)

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()

    def watch(self) -> None:
        with http_client() as http:
            while not self.stopped.wait(PROBE_S):
                with self.lock:
                    watched = dict(self.watched)
                for name, (root, token) in watched.items():
                    answered = answers_health(http, root)
                    with self.lock:
                        if self.watched.get(name, (None, None))[1] is token:  # not dropped or started again since
                            self.missed[name] = 0 if answered else self.missed[name] + 1


def http_client() -> httpx.Client:
    return httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=False)  # no proxy between the nodes
