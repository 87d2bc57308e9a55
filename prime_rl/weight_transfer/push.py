"""The trainer's side of a pushed transfer (inference.weight_transfer=nccl|gloo).

The orchestrator, the server's only client, decides when the server may change: between two of its generations,
exactly where it would reload files. So the trainer publishes weights/step_N empty (the policy exists), the
orchestrator asks for it there (REQUESTED), and the trainer then broadcasts it through vLLM's weight-transfer
engine and says so (PUSHED). Until then the trainer keeps its parameters as they are: one version in flight at
most, and every version the orchestrator sees is the one it is served."""

import asyncio
import os
import random
import socket
import time
from pathlib import Path

import torch

from prime_rl.config.layout import PUSH_BUFFER_BYTES, PUSH_BUFFERS
from prime_rl.config.schema import Config, WeightTransfer, num_nodes
from prime_rl.inference.server_urls import student_urls
from prime_rl.models import student_dir
from prime_rl.protocol.atomic import publish_dir, write_text
from prime_rl.protocol.handoff import ANNOUNCED_FALLBACK_S, Listener, announce
from prime_rl.protocol.run_dir import RunDir
from prime_rl.weight_transfer import gloo
from prime_rl.weight_transfer.client import ServerWeights
from prime_rl.weight_transfer.source import ModelWeights, check_checkpoint_names
from prime_rl.weight_transfer.watchdog import watchdog

HOST = "127.0.0.1"  # one node: the trainer and the student server share it
PORTS_FROM = 20000  # the rendezvous port's range starts here and ends below the ephemeral ports


class WeightPush:
    def __init__(self, cfg: Config, model: torch.nn.Module, rank: int, dtype: torch.dtype):
        check_checkpoint_names(model, student_dir(cfg))
        self.run_dir = RunDir(cfg.run_dir)
        self.main = rank == 0  # the sender: the server's routes, the files of the protocol
        self.timeout_s = cfg.step_timeout_s
        self.listener = Listener(self.run_dir.handoff("push"))  # every rank: each joins the broadcast's gather
        self.server = ServerWeights(student_roots(cfg), cfg.step_timeout_s) if self.main else None
        if self.main:
            self.server.wait_served(cfg.launcher.ready_timeout_s)
        group = 1 + self.server.workers() if self.main else 0  # the sender, then the servers' workers
        self.engine = start_engine(init_info(cfg, rank, group), self.server, ModelWeights(model, dtype), self.timeout_s)
        self.wait_s = 0.0  # waiting for the orchestrator's request, for the step's metrics
        self.push_s = 0.0  # the transfer itself

    def publish(self, step: int) -> None:
        """weights/step_<step> without files: the orchestrator may ask for these weights now."""
        if self.main:
            publish_dir(self.run_dir.weights(step), lambda _: None)

    def push_when_asked(self, step: int) -> None:
        """Wait for the orchestrator's request of weights `step` (published), then push them (every rank)."""
        start = time.monotonic()
        error = f"the orchestrator did not ask for weights {step} within {self.timeout_s:.0f}s; is it alive?"
        self.listener.wait(self.run_dir.push_requested(step).exists, self.timeout_s, ANNOUNCED_FALLBACK_S, error)
        sent = time.monotonic()
        self.wait_s += sent - start
        stuck = (
            f"the push of weights {step} did not finish within {self.timeout_s:.0f}s (step_timeout_s): the student "
            "server failed mid-transfer or stopped answering; see its log"
        )
        with watchdog(self.timeout_s, stuck):
            self.engine.send_weights()
            if self.main:
                self.server.serve_update()
        if self.main:
            write_text(self.run_dir.pushed(step), "")
            announce(self.run_dir.handoff("weights"))
        self.push_s += time.monotonic() - sent

    def take_times(self) -> dict[str, float]:
        times = {"time/push": self.push_s, "time/wait_push": self.wait_s}
        self.push_s = self.wait_s = 0.0
        return times

    def close(self) -> None:
        self.listener.close()
        self.engine.shutdown()
        if self.server:
            self.server.close()


def start_engine(info, server: ServerWeights | None, source: ModelWeights, timeout_s: float):
    """vLLM's trainer engine for `info`, its group met with the servers' workers within `timeout_s`, else the
    process ends with one line: NCCL's set-up (ncclCommInitRank) waits for every rank without a bound."""
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    stuck = (
        f"the weight transfer's set-up did not finish within {timeout_s:.0f}s (step_timeout_s): a student server's "
        "worker failed or never joined; see its log"
    )
    with watchdog(timeout_s, stuck):
        return WeightTransferTrainerFactory.trainer_init(info, client=server, source=source)


def init_info(cfg: Config, rank: int, world_size: int):
    """The trainer engine's init info: vLLM's NCCL one, or gloo's (registered with vLLM's factory here)."""
    if cfg.inference.weight_transfer == WeightTransfer.gloo:
        gloo.register()
        return gloo.GlooTrainerInitInfo(trainer_address(cfg), world_size, cfg.step_timeout_s, rank=rank)
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

    # counted in the fit checks (config/layout.py push_bytes)
    buffers = {"packed_buffer_size_bytes": PUSH_BUFFER_BYTES, "packed_num_buffers": PUSH_BUFFERS}
    return NCCLTrainerInitInfo(HOST, rendezvous_port(), world_size, rank=rank, **buffers)


def rendezvous_port() -> int:
    """A free port for NCCL's rendezvous store, which takes a number, not 0, and binds it only later: chosen below
    the kernel's ephemeral range, which every outgoing connection and every bind to port 0 draws from, so no other
    process is handed it in between (a random one, so two runs on a node do not try the same)."""
    low = first_ephemeral_port()
    for port in random.sample(range(PORTS_FROM, low), min(100, max(low - PORTS_FROM, 0))):
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a range that leaves nothing below it (or all taken): one of the kernel's own
        s.bind((HOST, 0))
        return s.getsockname()[1]


def first_ephemeral_port() -> int:
    """Where the kernel's range for ports it chooses itself begins (Linux's default where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except OSError:
        return 32768


def trainer_address(cfg: Config) -> str:
    """Where the servers' workers reach trainer rank 0: this node, or in a multi-node job its SLURM node name, which
    every node resolves (the servers' URLs are node names too)."""
    return os.environ["SLURMD_NODENAME"] if num_nodes(cfg.deployment) > 1 else HOST


def student_roots(cfg: Config) -> list[str]:
    """The student servers' URLs without /v1 (inference/server_urls.py), waited for as the orchestrator waits."""
    return [url.removesuffix("/v1") for url in asyncio.run(student_urls(cfg))]
