"""The head of a multi-node job watches the other nodes' servers while the run goes on: a node that dies or is cut
off ends the run within about PROBE_S x STRIKES seconds, naming it, where the orchestrator's requests to it would
otherwise hang (a cut link answers nothing, not even a refusal)."""

import threading

import httpx

from prime_rl.launcher.plan import RemoteServer
from prime_rl.protocol.servers import answers_health

PROBE_S = 5.0  # how often each server is asked for /health
PROBE_TIMEOUT_S = 2.0  # one probe's wait: a server that does not answer within it missed the probe
STRIKES = 3  # probes missed in a row that make a server lost


class RemoteServersWatch:
    def __init__(self, servers: list[RemoteServer]):
        self.servers = servers
        self.lost: RemoteServer | None = None  # set by the watch: the first server that missed STRIKES probes
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.watch, name="remote-servers", daemon=True)

    def start(self) -> None:
        if self.servers:
            self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join()

    def watch(self) -> None:
        missed = dict.fromkeys(range(len(self.servers)), 0)
        with http_client() as http:
            while not self.stopped.wait(PROBE_S):
                for k, server in enumerate(self.servers):
                    missed[k] = 0 if answers_health(http, server.root) else missed[k] + 1
                    if missed[k] >= STRIKES:
                        self.lost = server
                        return

    def gone_now(self) -> RemoteServer | None:
        """The first server that is lost, or does not answer a probe now (asked when a role failed: the cause)."""
        if self.lost or not self.servers:
            return self.lost
        with http_client() as http:
            return next((s for s in self.servers if not answers_health(http, s.root)), None)


def http_client() -> httpx.Client:
    return httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=False)  # no proxy between the nodes
