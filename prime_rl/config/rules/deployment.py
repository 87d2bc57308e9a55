"""Where the roles run: LoRA's serving, nodes, the colocated layout, weight transfer, GPU counts and parallelism."""

from prime_rl.config.layout import pushes_weights
from prime_rl.config.modes import modes_with, uses
from prime_rl.config.schema import (
    Config,
    Layout,
    WeightTransfer,
    node_gpus,
    num_nodes,
)
from prime_rl.config.teachers import (
    local_teachers,
    teacher_key,
)
from prime_rl.config.user_error import check


def lora_dropout(cfg: Config, _: int) -> None:
    lora = cfg.trainer.lora
    if lora.enabled:
        check(
            lora.dropout == 0 or not uses(cfg, lambda m: m.trains_sampled_policy),
            ["trainer.lora.dropout", "training_mode"],
            f"must be 0 in {modes_with(lambda m: m.trains_sampled_policy)}: with dropout the trainer's policy is not "
            "the one vLLM sampled from",
            f"set trainer.lora.dropout=0 (it regularises {modes_with(lambda m: not m.trains_sampled_policy)} only)",
        )


def node_ports(cfg: Config, _: int) -> None:
    d = cfg.deployment
    check(
        (d.num_infer_nodes > 0) == (d.num_train_nodes > 0),
        ["deployment.num_infer_nodes", "deployment.num_train_nodes"],
        f"{d.num_infer_nodes} inference and {d.num_train_nodes} trainer nodes: a multi-node job needs both",
        "set both to 1 or more, or both to 0 for a one-node job",
    )


def colocated(cfg: Config, _: int) -> None:
    """One device shared in turns: the CPU or one GPU, one node, one trainer process, no second device for a
    teacher."""
    d = cfg.deployment
    if d.layout != Layout.colocated:
        return
    fix_gpus = "use deployment=colocated (CPU) or deployment=colocated_gpu (one GPU); more GPUs: deployment=gpu"
    check(
        d.num_infer_gpus == d.num_train_gpus <= 1,
        ["deployment.layout", "deployment.num_infer_gpus", "deployment.num_train_gpus"],
        f"colocated roles share one device, but num_infer_gpus={d.num_infer_gpus}, num_train_gpus={d.num_train_gpus}",
        fix_gpus,
    )
    check(
        d.num_teacher_gpus is None,
        ["deployment.layout", "deployment.num_teacher_gpus"],
        "a colocated teacher shares the student's device and gets no GPUs of its own",
        "drop deployment.num_teacher_gpus",
    )
    check(
        num_nodes(d) == 1,
        ["deployment.layout", "deployment.num_infer_nodes", "deployment.num_train_nodes"],
        "the colocated layout shares one machine's device, a multi-node job has several",
        "use deployment.layout=separate for a multi-node job",
    )
    check(
        cfg.trainer.num_procs == 1,
        ["deployment.layout", "trainer.num_procs"],
        f"num_procs={cfg.trainer.num_procs}: in turns, one trainer process already has every core",
        "drop trainer.num_procs",
    )


def weight_transfer(cfg: Config, _: int) -> None:
    """A push (nccl, gloo) hands the trainer's full weights to the student servers: gloo over TCP to any node's,
    nccl device to device on this node's. An adapter, or one GPU shared in turns, go through files."""
    if not pushes_weights(cfg):
        return
    way = cfg.inference.weight_transfer
    d, key = cfg.deployment, f"inference.weight_transfer={way.value}"
    check(
        not cfg.trainer.lora.enabled,
        ["inference.weight_transfer", "lora"],
        f"{key} pushes full weights; under LoRA the server loads the adapter from the run dir",
        "set inference.weight_transfer=files, or lora=off",
    )
    if way == WeightTransfer.gloo:
        check(
            d.num_infer_gpus == 0,
            ["inference.weight_transfer", "deployment.num_infer_gpus"],
            "gloo is the CPU build's transport, the student server runs on GPUs",
            "set inference.weight_transfer=nccl (or files) on GPUs",
        )
        return
    check(
        num_nodes(d) == 1,
        ["inference.weight_transfer", "deployment.num_infer_nodes"],
        f"{key} reaches the student server of the trainer's own node; a multi-node job has one per node",
        "set inference.weight_transfer=files for a multi-node job (gloo crosses nodes, on CPU nodes)",
    )
    check(
        d.num_infer_gpus > 0 and d.num_train_gpus > 0,
        ["inference.weight_transfer", "deployment.num_infer_gpus", "deployment.num_train_gpus"],
        f"nccl moves weights between GPUs, but num_infer_gpus={d.num_infer_gpus}, num_train_gpus={d.num_train_gpus}",
        "use deployment=gpu, or inference.weight_transfer=gloo (or files) on CPU",
    )
    check(
        d.layout != Layout.colocated,
        ["inference.weight_transfer", "deployment.layout"],
        "nccl needs the trainer and the student server on GPUs of their own; colocated they share one",
        "use deployment=gpu, or inference.weight_transfer=files",
    )


def standing_server(cfg: Config, _: int) -> None:
    """A standing student server (inference.url) is one server of this node that loads each step's weights from
    the run dir, as a server of the run's own does."""
    if not cfg.inference.url:
        return
    check(
        not pushes_weights(cfg),
        ["inference.url", "inference.weight_transfer"],
        "a standing server loads each step's weights from the run dir; a push needs a server started by the run",
        "set inference.weight_transfer=files, or drop inference.url",
    )
    check(
        num_nodes(cfg.deployment) == 1,
        ["inference.url", "deployment.num_infer_nodes"],
        "a multi-node job starts a student server on each inference node",
        "drop inference.url for a multi-node job",
    )


def gpu_counts(cfg: Config, visible_gpus: int) -> None:
    d = cfg.deployment
    local = local_teachers(cfg)
    check(
        d.num_teacher_gpus is None or local,
        ["deployment.num_teacher_gpus", "teacher"],
        f"GPUs for a teacher server, but teacher={cfg.teacher.kind.value} starts none",
        "drop deployment.num_teacher_gpus or use teacher=local_vllm",
    )
    if d.num_infer_gpus > 0 and local and d.layout != Layout.colocated:
        names = ", ".join(teacher_key(name) for name in local)
        check(
            bool(d.num_teacher_gpus),
            ["deployment.num_teacher_gpus"],
            f"a GPU deployment needs GPUs for the local teachers' servers ({names})",
            f"set deployment.num_teacher_gpus={len(local)} (one each) or more",
        )
        check(
            d.num_teacher_gpus % len(local) == 0,
            ["deployment.num_teacher_gpus"],
            f"{d.num_teacher_gpus} GPUs do not split evenly between the servers of {len(local)} local teachers "
            f"({names})",
            f"set deployment.num_teacher_gpus to a multiple of {len(local)}",
        )
    check_gpu_count(cfg, visible_gpus)


def check_gpu_count(cfg: Config, visible_gpus: int) -> None:
    """The GPUs a node of the job uses fit the `visible_gpus` it sees: checked at launch against what the job
    will get, and again by the job against what it got (a SLURM allocation)."""
    d = cfg.deployment
    counts = ["deployment.num_infer_gpus", "deployment.num_train_gpus"]
    if d.num_teacher_gpus is not None:
        counts.append("deployment.num_teacher_gpus")
    asked = node_gpus(d)  # multi-node: each node sees its own GPUs
    check(
        asked <= visible_gpus,
        counts,
        f"{asked} GPUs asked{' per node' if num_nodes(d) > 1 else ''} but {visible_gpus} visible",
        "lower the GPU counts or set CUDA_VISIBLE_DEVICES to more devices",
    )


def parallelism(cfg: Config, _: int) -> None:
    d, t, inf = cfg.deployment, cfg.trainer, cfg.inference
    if d.num_train_gpus > 0:
        check(
            t.num_procs in (1, d.num_train_gpus),
            ["trainer.num_procs", "deployment.num_train_gpus"],
            f"num_procs={t.num_procs} but on GPUs the trainer runs one process per GPU ({d.num_train_gpus})",
            "drop trainer.num_procs and set deployment.num_train_gpus",
        )
    procs_key = "deployment.num_train_gpus" if d.num_train_gpus > 0 else "trainer.num_procs"
    check(
        not t.lora.enabled or max(d.num_train_gpus, t.num_procs) * max(d.num_train_nodes, 1) == 1,
        ["trainer.lora.enabled", procs_key],
        "LoRA trains in one trainer process only (no FSDP sharding of peft adapters yet)",
        f"use lora=off, or {procs_key}=1",
    )
    if d.num_infer_gpus > 0:
        check(
            inf.tp * inf.dp == d.num_infer_gpus,
            ["inference.tp", "inference.dp", "deployment.num_infer_gpus"],
            f"tp={inf.tp} x dp={inf.dp} = {inf.tp * inf.dp} GPUs but the student server has {d.num_infer_gpus}",
            "make inference.tp * inference.dp equal deployment.num_infer_gpus",
        )
    else:
        check(
            inf.tp == 1 and inf.dp == 1,
            ["inference.tp", "inference.dp"],
            f"tp={inf.tp}, dp={inf.dp}: the CPU server (deployment.num_infer_gpus=0) runs one process",
            "use inference.tp=1 inference.dp=1, or set deployment.num_infer_gpus",
        )
