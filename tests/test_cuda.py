"""What only a CUDA device can show (issue 47): the trainer's weights are read after the optimizer's kernels, whichever
stream reads them, and a device's memory is read as CUDA_VISIBLE_DEVICES names it.
`bash bench/gpu_smoke.sh trainer` runs this file on a GPU machine; here every test is skipped."""

import pytest
import torch

from prime_rl.launcher.gpu_memory import gpu_total_bytes
from prime_rl.weight_transfer.gather import whole_parameters

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_weights_are_read_after_the_optimizers_kernels_from_any_stream():
    """vLLM's packed broadcast reads the parameters inside its own stream, which does not wait for the default
    stream's kernels: whole_parameters lets none be read while the optimizer's step is still queued there."""
    model = torch.nn.Linear(1024, 1024, device="cuda")
    with torch.no_grad():  # each kernel once: CUDA's lazy loading of a kernel waits for the whole device
        torch.cuda._sleep(1000), model.weight.add_(0.0), model.weight.to(torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # about a second at H100/H200 clocks: the step below stays queued
    with torch.no_grad():
        model.weight.add_(1.0)  # the optimizer's step
    assert not torch.cuda.default_stream().query()  # the control: it has not run yet
    with torch.cuda.stream(torch.cuda.Stream()):  # as vLLM reads
        name, sent = next(whole_parameters(model, torch.bfloat16))
        assert torch.cuda.default_stream().query()  # the step ran before the first read
    torch.cuda.synchronize()
    assert name == "weight" and torch.equal(sent, model.weight.detach().to(torch.bfloat16))


def test_a_gpus_memory_is_read_by_index_and_by_uuid():
    """The launcher's fit checks read a device as CUDA_VISIBLE_DEVICES names it: a MIG slice only by its UUID."""
    uuid = f"GPU-{torch.cuda.get_device_properties(0).uuid}"
    total = torch.cuda.mem_get_info(0)[1]
    assert gpu_total_bytes("0") == total
    assert gpu_total_bytes(uuid) == total
