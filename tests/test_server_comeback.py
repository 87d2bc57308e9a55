"""The orchestrator's side of a server restarted in place (prime_rl/orchestrator/server_comeback.py), against a real
HTTP endpoint and a real run dir: requests wait while the launcher says the server is down, the server is brought
back once before any request reaches it, and a request its death failed is sent again once per restart. The
launcher's side, and both together with real servers killed and hung: tests/test_faults.py."""

import asyncio
import json

import pytest

from prime_rl.config import compose_config
from prime_rl.config.layout import restarts_in_place
from prime_rl.inference.client import InferenceClient, InferenceError
from prime_rl.launcher.plan import Role
from prime_rl.launcher.server_restarts import on_port
from prime_rl.orchestrator import server_comeback
from prime_rl.orchestrator.server_comeback import ServerComeback
from prime_rl.protocol.servers import Restarts, write_restarts
from tests.http_stub import StubHandler, serve_stub, stub_url


class Recorder(StubHandler):
    """Answers each POST with the status its test queued (200 once the queue is empty), recording what came."""

    seen: list[str] = []
    statuses: list[int] = []
    going_down = staticmethod(lambda: None)  # what happens as it answers a queued status (a restart by the launcher)

    def do_POST(self):
        self.body()
        Recorder.seen.append(self.path)
        status = Recorder.statuses.pop(0) if Recorder.statuses else 200
        if status != 200:
            Recorder.going_down()
        self.reply(status, json.dumps({"status": status}).encode())


@pytest.fixture
def endpoint():
    Recorder.seen, Recorder.statuses, Recorder.going_down = [], [], staticmethod(lambda: None)
    server = serve_stub(Recorder)
    yield stub_url(server)
    server.shutdown()


def client_of(endpoint: str, restarts, log: list[str]) -> InferenceClient:
    async def restore() -> str:
        log.append(f"restored after {len(Recorder.seen)} requests")
        await client.post("/restore")  # the restore's own request goes through at once
        return "what it served"

    client = InferenceClient(endpoint + "/v1", max_retries=0, backoff_s=0.01)
    client.comeback = ServerComeback(restarts, "inference", wait_s=10, restore=restore)
    return client


def test_requests_wait_while_the_server_is_down_and_it_is_brought_back_once_before_any_reaches_it(tmp_path, endpoint):
    restarts, log = tmp_path / "inference.restarts", []
    client = client_of(endpoint, restarts, log)

    async def scenario():
        write_restarts(restarts, Restarts(1, serving=False))
        requests = [asyncio.create_task(client.post("/completions", {"n": i})) for i in range(3)]
        await asyncio.sleep(0.6)
        waited = not any(r.done() for r in requests) and Recorder.seen == []
        write_restarts(restarts, Restarts(1, serving=True))
        await asyncio.gather(*requests)
        return waited

    assert asyncio.run(scenario())
    assert log == ["restored after 0 requests"]  # once, before any request reached the server
    assert Recorder.seen == ["/v1/restore"] + ["/v1/completions"] * 3
    assert client.comeback.restored == 1


def test_a_request_its_servers_restart_failed_goes_again_once_per_restart_and_no_other_failure_is_resent(
    tmp_path, endpoint, monkeypatch
):
    monkeypatch.setattr(server_comeback, "NOTICE_S", 0.3)
    restarts, log = tmp_path / "inference.restarts", []
    client = client_of(endpoint, restarts, log)

    async def failed_by_a_restart():
        Recorder.statuses = [503]  # the answer of a server going down, which the launcher restarts meanwhile
        Recorder.going_down = staticmethod(lambda: write_restarts(restarts, Restarts(1, serving=True)))
        answer = await client.post("/completions")
        Recorder.going_down = staticmethod(lambda: None)
        return answer

    async def failed_without_a_restart(status: int):
        Recorder.statuses = [status]
        with pytest.raises(InferenceError):
            await client.post("/completions")

    assert asyncio.run(failed_by_a_restart()) == {"status": 200}
    assert Recorder.seen == ["/v1/completions", "/v1/restore", "/v1/completions"]
    Recorder.seen = []
    asyncio.run(failed_without_a_restart(503))  # no restart came: the failure stands
    asyncio.run(failed_without_a_restart(400))  # the server's own refusal: never a restart's
    assert Recorder.seen == ["/v1/completions", "/v1/completions"] and len(log) == 1


def test_a_server_started_on_a_port_of_the_kernels_choosing_restarts_on_the_one_it_had(tmp_path):
    role = Role("inference", ["python", "-m", "vllm", "--port", "0", "--seed", "0"], {}, [], tmp_path, tmp_path, port=0)
    again = on_port(role, "http://127.0.0.1:41659")
    assert (again.port, again.command) == (41659, ["python", "-m", "vllm", "--port", "41659", "--seed", "0"])


@pytest.mark.parametrize(
    "overrides, student, teacher",
    [
        ([], True, True),
        (["inference.weight_transfer=gloo", "deployment.layout=separate"], False, True),  # its group takes no newcomer
        (["inference.url=http://127.0.0.1:9/v1"], False, True),  # a standing server is not the run's to restart
        (["deployment=colocated_gpu"], False, False),  # a server starting on the GPU the trainer is using
        (
            ["deployment.num_infer_nodes=1", "deployment.num_train_nodes=1", "deployment.layout=separate"],
            False,
            False,
        ),  # SLURM requeues a multi-node job
        (["launcher.server_restarts=0"], False, False),
    ],
)
def test_which_servers_are_restarted_in_place(overrides, student, teacher):
    cfg = compose_config(["training_mode=opd", "teacher=local_vllm", *overrides])
    assert (restarts_in_place(cfg, student=True), restarts_in_place(cfg, student=False)) == (student, teacher)
