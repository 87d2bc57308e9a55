"""What only a CUDA device can show (issue 47): the trainer's weights are read after the optimizer's kernels, whichever
stream reads them, and a device's memory is read as CUDA_VISIBLE_DEVICES names it.
the off-policy correction computes on the device what it computes on the CPU.
`bash bench/gpu_smoke.sh trainer` runs this file on a GPU machine; here every test is skipped."""

import pytest
import torch

from prime_rl.config.schema import CorrectionConfig, LossConfig
from prime_rl.launcher.gpu_memory import gpu_total_bytes
from prime_rl.protocol.batch import Sample
from prime_rl.trainer.data import collate_rows, to_device
from prime_rl.trainer.loss import rl_loss
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


@pytest.mark.parametrize(
    "fix",
    [
        CorrectionConfig(),  # band
        CorrectionConfig(prob_band=0.0, mask_low=0.0, mask_high=0.0, truncate_at=2.0),  # token_tis
        CorrectionConfig(prob_band=0.0, mask_low=0.0, mask_high=0.0, truncate_level="sequence", truncate_at=2.0),
        CorrectionConfig(prob_band=0.0, mask_level="sequence", mask_high=2.0, truncate_at=2.0),  # seq_mask_tis
    ],
)
def test_the_correction_gives_on_the_device_the_cpus_loss_gradient_and_metrics(fix):
    """Random samples of two sources, packed: every weight, mask and per-source sum as the CPU computes them."""
    gen = torch.Generator().manual_seed(0)
    samples = [
        Sample([1, 2], list(range(3, 3 + n)), (torch.randn(n, generator=gen) - 1).tolist(), advantage=a, source=src)
        for n, a, src in [(5, 1.0, "x"), (7, -0.5, "y"), (3, 0.25, "x"), (6, -1.0, "y")]
    ]
    batch = collate_rows([samples[:2], samples[2:]], pad_id=0)
    pi = (batch.inference_logprobs + 0.7 * torch.randn(batch.input_ids.shape, generator=gen)).clamp(max=0)
    results = []
    for device in ("cpu", "cuda"):
        logprobs = pi.to(device).requires_grad_()
        loss, sums = rl_loss(logprobs, to_device(batch, device), LossConfig(correction=fix), total_tokens=21)
        loss.backward()
        results.append((loss.item(), logprobs.grad.cpu(), sums))
    (cpu_loss, cpu_grad, cpu_sums), (gpu_loss, gpu_grad, gpu_sums) = results
    assert gpu_loss == pytest.approx(cpu_loss, rel=1e-5) and torch.allclose(gpu_grad, cpu_grad, rtol=1e-5, atol=1e-7)
    assert gpu_sums.keys() == cpu_sums.keys() and "by_source/x/mismatch_kl" in cpu_sums
    assert all(gpu_sums[k] == pytest.approx(v, rel=1e-5, abs=1e-6) for k, v in cpu_sums.items()), (cpu_sums, gpu_sums)
