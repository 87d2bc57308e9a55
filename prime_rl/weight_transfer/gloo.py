"""inference.weight_transfer=gloo: vLLM's NCCL weight transfer protocol (its routes, its per-round update info,
trainer rank 0 broadcasting to the server's workers) with gloo over TCP as the transport. The CPU build of vLLM
ships no CPU transport; this one is registered with vLLM's factories on both sides, so the trainer and the server
run the same code path as under nccl, only the broadcast differs. BACKEND is its name there (inference/weight_reload.py
registers the server's side by path)."""

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar

import torch
import torch.distributed as dist
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    WeightTransferEngine,
    WeightTransferInitInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferUpdateInfo

from prime_rl.config.schema import WeightTransfer

BACKEND = WeightTransfer.gloo.value  # the name both factories know it by (vLLM's --weight-transfer-config backend)
SENDER = 0  # the trainer's rank in the group: the server's workers follow it


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    """What a server worker needs to join the trainer's group (the payload of /init_weight_transfer_engine)."""

    master_address: str
    master_port: int
    rank_offset: int  # the rank of the server's first worker
    world_size: int  # the trainer and every worker
    timeout_s: float  # how long one broadcast may wait for its peers


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    backend: ClassVar[str] = BACKEND

    master_address: str  # where the trainer's rendezvous store listens (the server's workers connect to it)
    world_size: int  # the trainer and every worker of the server
    timeout_s: float = 1800.0


def open_group(store: dist.Store, rank: int, world_size: int, timeout_s: float) -> dist.ProcessGroup:
    """A gloo group of its own, beside any default process group of the process (vLLM's, torchrun's)."""
    return dist.ProcessGroupGloo(store, rank, world_size, timedelta(seconds=timeout_s))


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, NCCLWeightTransferUpdateInfo]):
    """The server worker's side: receives each parameter from the trainer and loads it through vLLM's layerwise
    reload, as its NCCL engine does."""

    init_info_cls = GlooInitInfo
    update_info_cls = NCCLWeightTransferUpdateInfo

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self.group: dist.ProcessGroup | None = None

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        parallel = self.parallel_config
        rank = init_info.rank_offset + parallel.data_parallel_index * parallel.world_size + parallel.rank
        store = dist.TCPStore(init_info.master_address, init_info.master_port, is_master=False)
        self.group = open_group(store, rank, init_info.world_size, init_info.timeout_s)

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def update_weights(self, update_info: dict) -> None:
        # the base class synchronises an accelerator afterwards; a CPU has none, and gloo's wait() already did
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("gloo weight transfer not initialized: call /init_weight_transfer_engine first")
        for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names, update_info.shapes):
            weight = torch.empty(shape, dtype=getattr(torch, dtype_name))
            self.group.broadcast(weight, SENDER).wait()
            self.model.load_weights([(name, weight)])

    def shutdown(self) -> None:
        self.group = None


class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine[GlooTrainerInitInfo]):
    """The trainer's side: rank 0 opens the rendezvous, has the server's workers join, and broadcasts the source
    each round between /start_weight_update and /finish_weight_update; other ranks only join the gather."""

    init_info_cls = GlooTrainerInitInfo

    def __init__(self, *, client, source, is_sender: bool = True) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.group: dist.ProcessGroup | None = None

    @classmethod
    def trainer_init(cls, init_info: GlooTrainerInitInfo, *, client, source=None) -> "GlooTrainerWeightTransferEngine":
        engine = cls(client=client, source=source, is_sender=init_info.is_sender)
        if not engine.is_sender:
            return engine
        # port 0: the kernel picks a free one, which the workers then learn from the init info
        store = dist.TCPStore(init_info.master_address, 0, is_master=True, wait_for_workers=False)
        workers = GlooInitInfo(
            init_info.master_address, store.port, SENDER + 1, init_info.world_size, init_info.timeout_s
        )
        # the workers block in /init_weight_transfer_engine until the whole group has met: both sides at once
        with ThreadPoolExecutor(max_workers=1) as pool:
            joined = pool.submit(client.init_weight_transfer_engine, vars(workers))
            engine.group = open_group(store, SENDER, init_info.world_size, init_info.timeout_s)
            joined.result()
        return engine

    def send_weights(self) -> None:
        meta = self.source.metadata()
        if not self.is_sender:
            for _ in self.source:  # each parameter's gather is a collective of every trainer rank
                pass
            return
        update_info = NCCLWeightTransferUpdateInfo(
            names=[m.name for m in meta],
            dtype_names=[str(m.dtype).removeprefix("torch.") for m in meta],
            shapes=[list(m.shape) for m in meta],
        )
        self.client.start_weight_update()
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            received = pool.submit(self.client.update_weights, vars(update_info))
            for (name, tensor), m in zip(self.source, meta, strict=True):
                if name != m.name or tensor.dtype != m.dtype or tuple(tensor.shape) != m.shape:
                    raise ValueError(f"the weights yielded {name} {tensor.dtype} {tuple(tensor.shape)}, not {m}")
                self.group.broadcast(tensor.contiguous(), SENDER).wait()
            received.result()
        finally:
            pool.shutdown(wait=False)  # a failed broadcast leaves the request hanging: do not wait for it
        self.client.finish_weight_update()

    def shutdown(self) -> None:
        self.group = None


def register() -> None:
    """Make `gloo` known to vLLM's trainer factory in this process (the server's side registers itself through
    inference/weight_reload.py)."""
    with contextlib.suppress(ValueError):  # registered already in this process
        WeightTransferTrainerFactory.register_engine(BACKEND, GlooTrainerWeightTransferEngine)
