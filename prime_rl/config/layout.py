"""Where the roles run and who has the device when: the separate layout (each role its own share, all at once)
or the colocated one (one device, every role in turn). What the plan prints, the launcher checks and each process
does in its turn all come from here."""

import os
from dataclasses import dataclass

from prime_rl.config.modes import RolloutSource, Scorer, uses
from prime_rl.config.schema import Config, Layout, ReferenceSource, WeightTransfer, num_nodes
from prime_rl.config.teachers import local_teachers, teacher_key, teacher_view

GIB = 1 << 30
# bytes per trainer parameter resident on the GPU: fp32 weights, fp32 gradients, AdamW's two fp32 moments
FULL_BYTES_PER_PARAM = 16
FROZEN_BYTES_PER_PARAM = 4  # LoRA: the frozen base in fp32 (the adapter itself is a rounding error)
# a GPU server's prompt-logprob logits per forward (a teacher's, opsd's student's), outside its share
# (inference/server.py scoring_batched_tokens)
SCORING_LOGITS_BYTES = 2 * GIB
# vLLM's packed NCCL transfer (inference.weight_transfer=nccl): buffers of this size, each closed by the tensor that
# fills it, so up to one whole tensor over its size (vLLM's default is 1 GiB); PUSH_BUFFERS is how many it sends
# at once (its default 2), and the producer holds one more at a time: the one it packs (the torch.cat of its tensors)
PUSH_BUFFER_BYTES = 256 << 20
PUSH_BUFFERS = 2
PUSH_BUFFERS_HELD = PUSH_BUFFERS + 1
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# what a GPU holds beside the roles' own memory (deployment.gpu_headroom_gib's auto): each process's CUDA context with
# cuBLAS (685 MiB measured on an H200, BENCHMARKS.md §18), and NCCL's and the allocators' slack
CONTEXT_BYTES = 3 * GIB // 4
SLACK_BYTES = 5 * GIB // 4


def is_colocated(cfg: Config) -> bool:
    """The layout's choice, or for `auto` the faster one where it was measured: in turns on a CPU (BENCHMARKS.md
    §10), a device per role on GPUs; a multi-node job or a multi-process CPU trainer cannot share one device."""
    d = cfg.deployment
    if d.layout != Layout.auto:
        return d.layout == Layout.colocated
    return d.num_infer_gpus == d.num_train_gpus == 0 and num_nodes(d) == 1 and cfg.trainer.num_procs == 1


def on_gpu(cfg: Config) -> bool:
    return cfg.deployment.num_infer_gpus > 0


def pushes_weights(cfg: Config) -> bool:
    """inference.weight_transfer=nccl|gloo: the trainer pushes each version to the student server when the
    orchestrator asks (weight_transfer/), instead of files the server reloads."""
    return cfg.inference.weight_transfer != WeightTransfer.files


def restarts_in_place(cfg: Config, student: bool) -> bool:
    """Whether the launcher restarts this server of the run in place when it dies or hangs (launcher.server_restarts):
    on one node (a multi-node job's servers are SLURM's to requeue), not on a shared GPU (a server starting there
    would take the memory the trainer is using), and the student's only where weights arrive as files (a pushed
    transfer's process group cannot take a new server in) on a server the run starts (not a standing one)."""
    if not cfg.launcher.server_restarts or num_nodes(cfg.deployment) > 1 or (is_colocated(cfg) and on_gpu(cfg)):
        return False
    return not student or not (pushes_weights(cfg) or cfg.inference.url)


def server_dtype(cfg: Config, on_gpu: bool) -> str:
    """inference.dtype of the servers, auto resolved: float32 on CPU, bfloat16 on GPU (the trainer exports in it)."""
    return cfg.inference.dtype if cfg.inference.dtype != "auto" else ("bfloat16" if on_gpu else "float32")


def cores() -> int:
    """The cores this process may run on (a SLURM allocation or taskset narrows them)."""
    return len(os.sched_getaffinity(0))


def trainer_threads(cfg: Config) -> int:
    """trainer.num_threads, or auto: in turns every core; on GPUs the node's cores shared by its trainer processes
    (their CPU work is loading, gathering and writing weights); beside a server generating on the CPU, one."""
    if cfg.trainer.num_threads:
        return cfg.trainer.num_threads
    if is_colocated(cfg):
        return cores()
    return max(1, cores() // cfg.deployment.num_train_gpus) if cfg.deployment.num_train_gpus else 1


@dataclass(frozen=True)
class Turn:
    holder: str  # the role that has the device
    work: tuple[str, ...]  # what it does with it, in order


def turns(cfg: Config) -> list[Turn]:
    """One step of the colocated layout: the orchestrator's turn, then the trainer's."""
    gpu = on_gpu(cfg)
    servers = "the student and teacher servers" if local_teachers(cfg) else "the student server"
    teachers = " and the teacher servers" if local_teachers(cfg) else ""
    orchestrator = [
        *([f"wake the student server's weights{teachers}"] if gpu else []),
        "reload the newest weights",
        *(["wake the student server's KV cache"] if gpu else []),
        "student generates" if uses(cfg, lambda m: m.rollouts == RolloutSource.student) else "",
        "teacher writes the rollouts" if uses(cfg, lambda m: m.rollouts == RolloutSource.teacher) else "",
        "teacher scores the rollouts" if uses(cfg, lambda m: m.scorer == Scorer.teacher) else "",
        "student scores its rollouts" if uses(cfg, lambda m: m.scorer == Scorer.self) else "",
        "rewards, advantages, evaluation when due",
        *([f"{servers} sleep"] if gpu else []),
        "write the batch",
    ]
    trainer = ["train one step", "export the weights", *(["free cached GPU memory"] if gpu else [])]
    return [Turn("orchestrator", tuple(w for w in orchestrator if w)), Turn("trainer", tuple(trainer))]


def gpu_shares(cfg: Config) -> dict[str, float]:
    """The GPU fractions the servers hold while awake, by the key that sets each."""
    shares = {"inference.gpu_memory_utilization": cfg.inference.gpu_memory_utilization}
    for name in local_teachers(cfg):
        shares[f"{teacher_key(name)}.gpu_memory_utilization"] = teacher_gpu_share(teacher_view(cfg, name))
    return shares


def teacher_gpu_share(cfg: Config) -> float:
    share = cfg.teacher.gpu_memory_utilization
    return cfg.inference.gpu_memory_utilization if share is None else share


def trainer_resident_bytes(cfg: Config, params: int) -> int:
    """What the trainer keeps on the GPU between steps (its activations come and go within its turn): its state,
    and for a KL to the starting weights computed here without LoRA their frozen copy (trainer/reference.py)."""
    lora = cfg.trainer.lora.enabled
    state = FROZEN_BYTES_PER_PARAM if lora else FULL_BYTES_PER_PARAM
    return params * (state + FROZEN_BYTES_PER_PARAM * keeps_reference_copy(cfg))


def keeps_reference_copy(cfg: Config) -> bool:
    loss = cfg.trainer.loss
    return loss.kl_ref_tau > 0 and loss.kl_ref_from == ReferenceSource.trainer and not cfg.trainer.lora.enabled


def trainer_state_text(cfg: Config, params: int) -> str:
    """What trainer_resident_bytes counts, in words."""
    kind = "LoRA" if cfg.trainer.lora.enabled else "full"
    return f"{params / 1e9:.2f} B parameters, {kind}" + (", the reference's frozen copy" * keeps_reference_copy(cfg))


def student_scores(cfg: Config) -> bool:
    """The student's server scores its own tokens (opsd): vLLM builds their prompt logits as a teacher's."""
    return uses(cfg, lambda m: m.scorer == Scorer.self)


def scoring_servers(cfg: Config) -> int:
    """The GPU servers that build prompt logits: each local teacher's (the served reference's too), opsd's student's."""
    return len(local_teachers(cfg)) + student_scores(cfg)


def gpu_fit_problem(cfg: Config, total_bytes: int, params: int) -> str | None:
    """Why the colocated roles cannot share one GPU of `total_bytes`, or None when they fit. In the orchestrator's
    turn the servers are awake with their shares while the trainer's weights and optimizer stay on the GPU; in the
    trainer's turn the servers sleep, so its activations have their shares too."""
    shares = gpu_shares(cfg)
    trainer = trainer_resident_bytes(cfg, params)
    logits = SCORING_LOGITS_BYTES * scoring_servers(cfg)
    headroom = headroom_bytes(cfg, processes=len(shares) + 1)  # the servers and the trainer
    asked = sum(shares.values()) * total_bytes + trainer + logits + headroom
    if asked <= total_bytes:
        return None
    parts = " + ".join(f"{k.split('.')[0]} {v:g}" for k, v in shares.items())
    return (
        f"{parts} of {total_bytes / GIB:.0f} GiB plus the trainer's {trainer / GIB:.1f} GiB "
        f"({trainer_state_text(cfg, params)}), "
        + (f"the scoring servers' {logits / GIB:.0f} GiB of prompt logits " if logits else "")
        + f"and {headroom / GIB:g} GiB of headroom (deployment.gpu_headroom_gib) exceed the GPU"
    )


def headroom_bytes(cfg: Config, processes: int) -> int:
    """deployment.gpu_headroom_gib, or auto for 0: the CUDA contexts of the `processes` that share a GPU, and slack."""
    gib = cfg.deployment.gpu_headroom_gib
    return int(gib * GIB) if gib else processes * CONTEXT_BYTES + SLACK_BYTES


def push_bytes(cfg: Config, largest_param: int) -> int:
    """What a pushed transfer holds on the GPU of each side beyond the model: the packed buffers it holds at once
    (vLLM's producer: those in flight and the one it packs) and the tensor being cast (`largest_param`: the model's
    largest parameter's elements)."""
    if cfg.inference.weight_transfer != WeightTransfer.nccl:
        return 0
    tensor = largest_param * DTYPE_BYTES[server_dtype(cfg, True)]
    return PUSH_BUFFERS_HELD * (PUSH_BUFFER_BYTES + tensor) + tensor


def trainer_fit_problem(cfg: Config, total_bytes: int, params: int, largest_param: int = 0) -> str | None:
    """Why the trainer's state alone (weights, gradients, AdamW's moments; FSDP shards it over every trainer GPU
    of the job, and no rank ever holds the whole model on its GPU) and a push's buffers cannot fit GPUs of
    `total_bytes`, or None. Its activations come on top: passing is no promise."""
    d = cfg.deployment
    gpus = d.num_train_gpus * max(d.num_train_nodes, 1)
    per_gpu = trainer_resident_bytes(cfg, params) / gpus
    push = push_bytes(cfg, largest_param)
    if per_gpu + push + headroom_bytes(cfg, processes=1) <= total_bytes:
        return None
    kind = "the frozen float32 weights" if cfg.trainer.lora.enabled else "float32 weights, gradients and AdamW state"
    kind += " and the reference's frozen copy" * keeps_reference_copy(cfg)
    return (
        f"the trainer's {per_gpu / GIB:.0f} GiB per GPU ({params / 1e9:.2f} B parameters: {kind}, sharded over "
        f"{gpus} GPU{'s' if gpus > 1 else ''})"
        + (f" and the weight push's {push / GIB:.1f} GiB of buffers" if push else "")
        + f" exceed a {total_bytes / GIB:.0f} GiB GPU"
    )


def server_push_problem(cfg: Config, total_bytes: int, largest_param: int) -> str | None:
    """Why the student server's GPU cannot hold its share and the buffers a push receives into (allocated outside
    the share, after vLLM sized its KV cache), or None."""
    push = push_bytes(cfg, largest_param)
    share, headroom = cfg.inference.gpu_memory_utilization, headroom_bytes(cfg, processes=1)
    if push == 0 or share * total_bytes + push + headroom <= total_bytes:
        return None
    return (
        f"inference {share:g} of {total_bytes / GIB:.0f} GiB plus the weight push's {push / GIB:.1f} GiB of receive "
        f"buffers and {headroom / GIB:g} GiB of headroom (deployment.gpu_headroom_gib) exceed the GPU"
    )
