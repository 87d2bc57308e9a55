"""Weights pushed to the student server (inference.weight_transfer=nccl|gloo): vLLM's weight-transfer routes driven
by our client and source, against a real vLLM server over gloo, and vLLM's own NCCL trainer engine up to its
transport. The whole loop (orchestrator asks, trainer pushes) runs in tests/test_e2e_rl.py."""

import asyncio
import contextlib
import json
import secrets
import socket
import subprocess
import sys
import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prime_rl.config import compose_config
from prime_rl.config.layout import PUSH_BUFFER_BYTES, PUSH_BUFFERS
from prime_rl.config.schema import WeightTransfer
from prime_rl.config.user_error import UserError
from prime_rl.inference.client import InferenceClient
from prime_rl.models.chat import prompt_ids
from prime_rl.prepare import prepare_student
from prime_rl.protocol.servers import SERVER_KEY_ENV
from prime_rl.weight_transfer.client import ServerWeights, WeightTransferError
from prime_rl.weight_transfer.push import HOST, PORTS_FROM, first_ephemeral_port, init_info
from prime_rl.weight_transfer.source import ModelWeights, check_checkpoint_names
from tests.conftest import ROOT
from tests.test_inference_vllm import GREEDY, PROMPTS, hf_greedy, hf_scores
from tests.vllm_server import serve

ROUTES = ("init_weight_transfer_engine", "start_weight_update", "update_weights", "finish_weight_update")


class Recorded:
    """A client that notes each route it is asked for, then calls it: the order vLLM's engines drive."""

    def __init__(self, client):
        self.client, self.calls = client, []
        for route in ROUTES:
            setattr(self, route, self.noting(route))

    def noting(self, route):
        def call(*args):
            self.calls.append((route, *args))
            return getattr(self.client, route)(*args) if self.client else None

        return call


def nudge(model, seed: int) -> None:
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)


@pytest.mark.vllm
def test_a_gloo_push_serves_exactly_the_trainers_weights_and_a_stale_output_layer_shows(tmp_path, monkeypatch):
    """Tied Qwen3 on vLLM's CPU build with the gloo backend: after each push the server's greedy output and logprobs
    are transformers' on the new weights; a push without the refresh of the tied output layer leaves the server on
    its old head, and its logprobs show it. Every route wants the run's key."""
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    from prime_rl.weight_transfer import gloo

    path = prepare_student(compose_config(["model=tiny_qwen3"]))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    check_checkpoint_names(model, path)  # the names pushed are the checkpoint's
    prompts = [prompt_ids(tok, p) for p in PROMPTS]
    key = secrets.token_hex(16)
    gloo.register()

    async def served(url):
        client = InferenceClient(f"{url}/v1", api_key_env=SERVER_KEY_ENV, max_retries=1)
        greedy = [g[0].token_ids for g in await client.complete("student", prompts, 1, GREEDY)]
        scores = await client.prompt_logprobs("student", [p + g for p, g in zip(prompts, greedy)])
        await client.close()
        return greedy, [s[1:] for s in scores]

    def expected():
        greedy = [hf_greedy(model, p) for p in prompts]
        return greedy, hf_scores(model, prompts, greedy)

    with serve(path, tmp_path, weight_transfer=WeightTransfer.gloo, env={SERVER_KEY_ENV: key}) as url:
        with pytest.raises(WeightTransferError) as refused:
            ServerWeights([url], 60).workers()  # no key in this process yet
        assert refused.value.status == 401
        monkeypatch.setenv(SERVER_KEY_ENV, key)
        server = ServerWeights([url], 60)
        client = Recorded(server)
        info = gloo.GlooTrainerInitInfo("127.0.0.1", 1 + server.workers(), 60.0, rank=0)
        source = ModelWeights(model, torch.float32)
        engine = WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)
        pushed = []
        for step in (1, 2):
            nudge(model, step)
            engine.send_weights()
            server.serve_update()
            pushed.append((asyncio.run(served(url)), expected()))
        nudge(model, 3)
        engine.send_weights()  # no refresh: the tied output layer keeps its old matmul weights on CPU
        greedy, scores = asyncio.run(served(url))
        stale = scores, hf_scores(model, prompts, greedy)
        server.serve_update()
        fresh = asyncio.run(served(url)), expected()
        engine.shutdown()
        server.close()

    for (greedy, scores), (hf_greedy_ids, hf_logprobs) in [*pushed, fresh]:
        assert greedy == hf_greedy_ids
        for s, e in zip(scores, hf_logprobs):
            assert s == pytest.approx(e, abs=1e-4)
    gap = max(abs(s - e) for got, want in zip(*stale) for s, e in zip(got, want))
    assert gap > 1e-2, gap
    assert [c[0] for c in client.calls] == [ROUTES[0], *ROUTES[1:] * 3]
    update = client.calls[2][1]
    names = [name for name, _ in model.named_parameters()]
    assert update["names"] == names and "lm_head.weight" not in names  # the tied head goes as the embedding
    assert set(update["dtype_names"]) == {"float32"}


def test_vllms_nccl_engine_sends_our_source_in_the_servers_dtype_between_start_and_finish(monkeypatch):
    """vLLM's own NCCL trainer engine, driven as the trainer drives it, with its transport replaced (no GPU here):
    the routes in order, an update payload that travels as JSON, and each parameter broadcast once in bf16 under
    the name the server loads it by."""
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerWeightTransferEngine

    model = AutoModelForCausalLM.from_pretrained(prepare_student(compose_config(["model=tiny_qwen3"])))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *_: None)  # the CPU build has no CUDA streams

    class Group:  # stands in for the NCCL communicator: keeps what rank 0 broadcasts
        sent = []

        def broadcast(self, tensor, src, stream):
            self.sent.append((src, tensor.clone()))

    client = Recorded(None)
    engine = NCCLTrainerWeightTransferEngine(
        client=client, source=ModelWeights(model, torch.bfloat16), is_sender=True, packed=False
    )
    engine.model_update_group = Group()
    engine.send_weights()

    assert [c[0] for c in client.calls] == list(ROUTES[1:])
    update = json.loads(json.dumps(client.calls[1][1]))  # what /update_weights carries
    params = dict(model.named_parameters())
    assert update["names"] == list(params) and set(update["dtype_names"]) == {"bfloat16"}
    assert update["shapes"] == [list(p.shape) for p in params.values()]
    assert [src for src, _ in Group.sent] == [0] * len(params)
    for (_, tensor), p in zip(Group.sent, params.values()):
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, p.detach().to(torch.bfloat16))


def test_vllms_packed_nccl_transfer_carries_our_weights_exactly_from_its_producer_to_its_consumer(monkeypatch):
    """Real runs pack (init_info: buffers of PUSH_BUFFER_BYTES, PUSH_BUFFERS of them): vLLM's packed producer, driven
    by its NCCL trainer engine with our source, and its consumer, reading the update info the server gets, cut the
    stream into the same chunks, and every parameter arrives as the trainer's, in bf16 (the streams of a GPU and the
    NCCL communicator stand in: no GPU here; a buffer of the largest tensor's size makes the tiny model many chunks)."""
    from vllm.distributed.weight_transfer import packed_tensor
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerWeightTransferEngine

    model = AutoModelForCausalLM.from_pretrained(prepare_student(compose_config(["model=tiny_qwen3"])))
    monkeypatch.setattr(packed_tensor, "_get_streams", lambda device, n: tuple(Stream() for _ in range(n)))
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    wire: list[torch.Tensor] = []

    class Sender:  # the trainer's side of the communicator: what rank 0 broadcasts goes on the wire
        def broadcast(self, tensor, src):
            wire.append(tensor.clone())

    class Receiver:  # a server worker's: each receive buffer is filled from the wire, which must fit it exactly
        def broadcast(self, tensor, src):
            sent = wire.pop(0)
            assert sent.shape == tensor.shape
            tensor.copy_(sent)

    buffer = max(p.numel() * 2 for p in model.parameters())  # bf16: no tensor overflows a buffer on its own
    client = Recorded(None)
    engine = NCCLTrainerWeightTransferEngine(
        client=client, source=ModelWeights(model, torch.bfloat16), packed_buffer_size_bytes=buffer
    )
    engine.model_update_group = Sender()
    engine.send_weights()
    chunks = len(wire)
    update = json.loads(json.dumps(client.calls[1][1]))  # what /update_weights carries to the workers
    received = {}
    packed_tensor.packed_nccl_broadcast_consumer(
        iter(
            (n, (shape, getattr(torch, d)))
            for n, d, shape in zip(update["names"], update["dtype_names"], update["shapes"])
        ),
        Receiver(),
        0,
        lambda pairs: received.update((name, t.clone()) for name, t in pairs),
        buffer_size_bytes=buffer,
        num_buffers=engine.packed_num_buffers,
        device="cpu",
    )
    params = dict(model.named_parameters())
    assert chunks > 2 and wire == [] and list(received) == list(params)
    for name, p in params.items():
        assert received[name].dtype == torch.bfloat16 and torch.equal(received[name], p.detach().to(torch.bfloat16))


class Stream:
    """A CUDA stream's stand-in: nothing to wait for on a CPU."""

    def synchronize(self) -> None:
        pass


def test_a_model_whose_parameters_are_named_otherwise_than_its_checkpoint_is_refused():
    path = prepare_student(compose_config(["model=tiny_qwen3"]))
    model = AutoModelForCausalLM.from_pretrained(path)
    check_checkpoint_names(model, path)
    model.model.extra = torch.nn.Linear(2, 2)  # a parameter the files do not hold
    with pytest.raises(UserError) as err:
        check_checkpoint_names(model, path)
    assert err.value.keys == ["inference.weight_transfer"] and "model.extra.weight" in str(err.value)


def test_the_nccl_rendezvous_is_on_a_free_port_the_kernel_hands_nobody_else_with_counted_buffers():
    """NCCL's rendezvous store binds its port only after the trainer chose it: a port from the kernel's ephemeral
    range could be handed to any outgoing connection in between."""
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

    cfg = compose_config(["deployment=gpu", "inference.weight_transfer=nccl"])
    infos = [init_info(cfg, 0, 2) for _ in range(5)]
    assert all(isinstance(info, NCCLTrainerInitInfo) for info in infos)
    for info in infos:
        assert PORTS_FROM <= info.master_port < first_ephemeral_port()
        with socket.socket() as s:
            s.bind((HOST, info.master_port))  # free
        assert (info.packed_buffer_size_bytes, info.packed_num_buffers) == (PUSH_BUFFER_BYTES, PUSH_BUFFERS)
    assert len({info.master_port for info in infos}) > 1  # drawn at random: two runs on a node rarely meet


WATCHED = """
import sys, time
from prime_rl.weight_transfer.watchdog import watchdog
with watchdog(float(sys.argv[1]), "the push of weights 3 did not finish"):
    time.sleep(float(sys.argv[2]))  # a wait Python cannot interrupt stands here as a sleep
print("finished")
"""


NEVER_JOINED = """
from prime_rl.weight_transfer import gloo
from prime_rl.weight_transfer.push import start_engine


class Server:  # a server whose worker never joins the group (it died, or hangs)
    def init_weight_transfer_engine(self, info):
        pass


gloo.register()
start_engine(gloo.GlooTrainerInitInfo("127.0.0.1", 2, 600, rank=0), Server(), None, timeout_s=1)
print("set up")
"""


@pytest.mark.integration
def test_a_transfer_whose_server_never_joins_ends_the_trainer_with_one_line_in_bounded_time():
    """The set-up's rendezvous waits for every rank (NCCL's without any bound; gloo's here for its own 600 s): the
    trainer's watchdog ends it at step_timeout_s, with one line."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", NEVER_JOINED], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "set up" not in done.stdout
    [line] = [x for x in done.stderr.strip().splitlines() if x.startswith("error: ")]
    assert "the weight transfer's set-up did not finish within 1s" in line
    assert time.monotonic() - started < 60


@pytest.mark.integration
@pytest.mark.parametrize("deadline, wait, code", [(0.5, 60, 1), (30, 0.1, 0)])
def test_a_stuck_push_ends_the_trainer_with_one_line_and_a_quick_one_does_not(deadline, wait, code):
    done = subprocess.run(
        [sys.executable, "-c", WATCHED, str(deadline), str(wait)], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == code
    if code:
        [line] = done.stderr.strip().splitlines()  # one line naming the weights whose push hung
        assert line.startswith("error: ") and "weights 3 " in line
        assert "finished" not in done.stdout
    else:
        assert done.stdout.strip() == "finished" and done.stderr == ""
