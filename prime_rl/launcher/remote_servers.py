"""The head of a multi-node job watches the other nodes' servers while the run goes on: a node that dies or is cut
off ends the run within about PROBE_S x STRIKES seconds, naming it, where the orchestrator's requests to it would
otherwise hang (a cut link answers nothing, not even a refusal)."""

from prime_rl.launcher.health_watch import HealthWatch, http_client
from prime_rl.launcher.plan import RemoteServer
from prime_rl.protocol.servers import answers_health

STRIKES = 3  # probes missed in a row that make a server lost


class RemoteServersWatch:
    def __init__(self, servers: list[RemoteServer]):
        self.servers = servers
        self.health = HealthWatch("remote-servers")

    def start(self) -> None:
        for server in self.servers:
            self.health.add(server.name, server.root)

    def stop(self) -> None:
        self.health.stop()

    @property
    def lost(self) -> RemoteServer | None:
        """The first server that missed STRIKES probes in a row."""
        return next((s for s in self.servers if self.health.missed_in_a_row(s.name) >= STRIKES), None)

    def gone_now(self) -> RemoteServer | None:
        """The first server that is lost, or does not answer a probe now (asked when a role failed: the cause)."""
        if self.lost or not self.servers:
            return self.lost
        with http_client() as http:
            return next((s for s in self.servers if not answers_health(http, s.root)), None)
