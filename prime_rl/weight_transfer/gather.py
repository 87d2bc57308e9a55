"""Sharded tensors made whole: FSDP2's DTensor parameters (and results such as a gradient norm) as plain tensors,
for the trainer's file exports and for a push to the student server alike. Outside a process group they are
plain already and come back as they are."""

from collections.abc import Iterator

import torch
from torch.distributed.tensor import DTensor


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """A sharded result (e.g. clip_grad_norm_ over DTensor grads) as a plain tensor."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def whole_parameters(model: torch.nn.Module, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter whole and in `dtype`, one at a time (on every rank: each gather is a collective).

    The local shard is cast before the gather (a DTensor keeps its sharding through `.to`): the gather moves
    `dtype`'s bytes and no whole float32 copy exists. The device's queued work (the optimizer's step) ends first:
    a reader may run on another CUDA stream (vLLM's packed broadcast reads inside its own), which would not wait
    for the default stream's kernels."""
    if any(p.is_cuda for p in model.parameters()):
        torch.cuda.synchronize()
    with torch.no_grad():
        for name, p in model.named_parameters():
            yield name, full_tensor(p.detach().to(dtype))
