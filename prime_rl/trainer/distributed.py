"""The multi-process trainer: torchrun ranks, FSDP2 sharding, the step's samples split by rank.

One process (the default) never creates a process group: `init_world` returns SINGLE and the helpers it
reaches (`all_sum`, weight_transfer/gather.py's `full_tensor`) hand their input back. Under torchrun every rank
runs the same loop on its share of the step's samples; the helpers below keep the result equal to one process
training on the whole batch, and leave the files to rank 0.
"""

import math
import os
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist
from accelerate import init_empty_weights
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer

from prime_rl.config.schema import Config
from prime_rl.config.timeouts import collective_timeout_s
from prime_rl.models import student_dir
from prime_rl.models.size import param_count
from prime_rl.protocol.batch import Sample
from prime_rl.trainer.data import TokenBatch, collate_rows, rows_of
from prime_rl.trainer.model import checkpoint_activations, model_config, pick_device
from prime_rl.weight_transfer.gather import whole_parameters

EXPORT_BYTES_PER_PARAM = 4  # the largest export rank 0 writes alone: float32 weights (checkpoints are sharded)


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1

    @property
    def main(self) -> bool:
        """Rank 0 alone writes files: weights, checkpoints, metrics, W&B."""
        return self.rank == 0


SINGLE = World()


def init_world(cfg: Config) -> tuple[World, torch.device]:
    """(this rank, its device). torchrun sets WORLD_SIZE; without it no process group exists."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    device = pick_device(cfg.trainer.device)
    if size == 1:
        return SINGLE, device
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before the group: NCCL binds each rank to its current device
    # the other ranks wait in a collective while rank 0 alone writes the weights it gathered
    timeout = collective_timeout_s(cfg, param_count(student_dir(cfg)), EXPORT_BYTES_PER_PARAM)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(seconds=timeout))
    return World(rank, size), device


def close_world(world: World) -> None:
    if world.size > 1:
        dist.destroy_process_group()


def load_sharded_model(cfg: Config, device: torch.device, world: World, compute: torch.dtype):
    """(model, tokenizer) under FSDP2 without a whole model on every rank: each builds the model without weights,
    shards it and allocates only its shards; rank 0 alone reads the files (the float32 model in its CPU memory
    once) and sends each rank its shards."""
    path = student_dir(cfg)
    config = model_config(cfg)
    with init_empty_weights(include_buffers=False):  # buffers (rotary frequencies) are computed, not loaded
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    checkpoint_activations(cfg, model)
    shard_model(model, compute)
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    model.to_empty(device=device)  # this rank's shards, uninitialised until rank 0 sends them
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(buffers[name])
    full = {}
    if world.main:
        full = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=torch.float32).state_dict()
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    return model, AutoTokenizer.from_pretrained(path)


def shard_model(model: torch.nn.Module, compute: torch.dtype) -> None:
    """FSDP2: each decoder layer is one all-gather unit, the root holds the rest (embeddings, head, norm). The
    sharded float32 parameters are the master weights; each forward gathers them in `compute` (trainer.dtype)
    and gradients are reduced in float32."""
    policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
    # transformers names its repeated blocks in _no_split_modules: exactly the units worth gathering one by one.
    block_names = set(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in block_names:
            fully_shard(module, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # Sum, not average, the ranks' gradients: the loss is already divided by the global token count.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # else a custom factor asks for PREMUL_SUM: not on gloo


def rank_micro_batches(
    samples: list[Sample], size: int, pad_id: int, world: World, pack_tokens: int = 0
) -> list[TokenBatch]:
    """This rank's contiguous share of the step, in rows of `size` per micro-batch (rows_of: packed or not), in as
    many micro-batches as every other rank has."""
    per_rank = math.ceil(len(samples) / world.size)
    shares = [rows_of(samples[r * per_rank : (r + 1) * per_rank], pack_tokens) for r in range(world.size)]
    # FSDP all-gathers in every forward: a rank with one micro-batch fewer would leave the others waiting.
    count = max(math.ceil(len(rows) / size) for rows in shares)
    mine = shares[world.rank]
    chunks = [mine[i * size : (i + 1) * size] for i in range(count)]
    return [collate_rows(chunk or [[_no_loss(samples[0])]], pad_id) for chunk in chunks]


def _no_loss(sample: Sample) -> Sample:
    """A stand-in that joins the collectives and contributes no tokens (a rank whose share ran out)."""
    nothing = {"completion_ids": [], "inference_logprobs": [], "streams": {}, "loss_mask": None}
    return replace(sample, **nothing, teacher_top_ids=None, teacher_top_logprobs=None)


def all_sum(values: dict[str, float], world: World) -> dict[str, float]:
    """Sum each value over the ranks (same keys on every rank)."""
    return all_reduce(values, world, dist.ReduceOp.SUM)


def all_max(values: dict[str, float], world: World) -> dict[str, float]:
    """Each value's maximum over the ranks (same keys on every rank)."""
    return all_reduce(values, world, dist.ReduceOp.MAX)


def all_reduce(values: dict[str, float], world: World, op) -> dict[str, float]:
    if world.size == 1 or not values:
        return values
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=op)
    return dict(zip(keys, t.tolist()))


def gathered_parameters(model, dtype: torch.dtype, world: World) -> dict[str, torch.Tensor]:
    """Every parameter whole, in `dtype`, on rank 0's CPU (empty elsewhere): rank 0's host memory holds the model
    in the export's dtype alone (bf16: half its float32 state). Every rank must call it."""
    return {name: whole.cpu() for name, whole in whole_parameters(model, dtype) if world.main}
