"""The process plan of one job: which roles run, with what command, environment, GPUs, port and log file.

The plan is pure data computed from the validated config; the dry run prints it and the supervisor runs it.
"""

import os
import socket
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from omegaconf import OmegaConf

from prime_rl.config.schema import Config, TeacherKind
from prime_rl.inference.server import STUDENT_MODEL_NAME, TEACHER_MODEL_NAME, vllm_command
from prime_rl.launcher.gpus import gpu_slices
from prime_rl.models import student_dir, teacher_dir

if TYPE_CHECKING:
    from prime_rl.launcher.multinode import Node


@dataclass
class Role:
    name: str  # inference | teacher_inference | orchestrator | trainer
    command: list[str]  # argv
    env: dict[str, str]  # additions to the launcher's environment
    gpus: list[str]  # CUDA_VISIBLE_DEVICES slice (empty: CPU)
    log_file: Path
    config_file: Path
    port: int | None = None  # servers only
    health_url: str | None = None  # servers only: ready when this answers 200
    server_key: bool = False  # gets the run's server key at spawn (servers require it, the orchestrator sends it)


@dataclass
class Plan:
    run_dir: Path
    config: Config  # the resolved config every role reads (ports filled in)
    roles: list[Role] = field(default_factory=list)
    node: Optional["Node"] = None  # multi-node: the node this plan runs on (prime_rl/launcher/multinode.py)

    def role(self, name: str) -> Role:
        return next(r for r in self.roles if r.name == name)

    @property
    def marker(self) -> str:
        """What every process of this plan carries in RUN_ENV (multi-node: per node, as nodes may share a host)."""
        return str(self.run_dir) + (f"#node{self.node.rank}" if self.node else "")

    @property
    def launcher_log(self) -> Path:
        return log_file(self.run_dir, "launcher", self.node.rank if self.node else None)


def free_port(taken: set) -> int:
    """A port nobody listens on now and that this plan has not handed out."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def build_plan(cfg: Config, run_dir: Path, visible: list[str], node: Optional["Node"] = None) -> Plan:
    """Every role of a one-node job, or with `node` (multi-node) the roles of that node."""
    run_dir = run_dir.resolve()
    taken: set = set()
    has_teacher_server = cfg.teacher.kind == TeacherKind.local_vllm
    cfg = replace(
        cfg,
        run_dir=str(run_dir),
        inference=replace(cfg.inference, port=cfg.inference.port or free_port(taken)),
        teacher=replace(cfg.teacher, port=(cfg.teacher.port or free_port(taken)) if has_teacher_server else 0),
    )
    here = set(node.roles) if node else {"inference", "teacher_inference", "orchestrator", "trainer"}
    slices = gpu_slices(cfg.deployment, visible, here if node else None)
    plan = Plan(run_dir, cfg, node=node)
    lora = cfg.trainer.lora
    if "inference" in here:
        plan.roles.append(
            _vllm_role(
                cfg,
                "inference",
                student_dir(cfg),
                STUDENT_MODEL_NAME,
                cfg.inference.port,
                slices["inference"],
                lora_rank=lora.rank if lora.enabled else 0,
                run_dir=run_dir,
                node=node,
            )
        )
    if has_teacher_server and "teacher_inference" in here:
        plan.roles.append(
            _vllm_role(
                cfg,
                "teacher_inference",
                teacher_dir(cfg),
                TEACHER_MODEL_NAME,
                cfg.teacher.port,
                slices["teacher_inference"],
                lora_rank=0,
                run_dir=run_dir,
                node=node,
            )
        )
    for name in [r for r in ("orchestrator", "trainer") if r in here]:
        config_file = run_dir / "configs" / f"{name}.yaml"
        plan.roles.append(
            Role(
                name=name,
                command=_module_command(cfg, name, config_file, node),
                env={"CUDA_VISIBLE_DEVICES": ",".join(slices[name])} if visible else {},
                gpus=slices[name],
                log_file=log_file(run_dir, name, node.rank if node else None),
                config_file=config_file,
                server_key=name == "orchestrator",
            )
        )
    return plan


def trainer_procs(cfg: Config) -> int:
    """Trainer processes: one per trainer GPU, else trainer.num_procs on CPU."""
    return cfg.deployment.num_train_gpus or cfg.trainer.num_procs


def log_file(run_dir: Path, name: str, node_rank: int | None = None) -> Path:
    """logs/<role>.log; multi-node logs/<role>.node<rank>.log, since the nodes share the run dir."""
    return run_dir / "logs" / (f"{name}.log" if node_rank is None else f"{name}.node{node_rank}.log")


def _module_command(cfg: Config, name: str, config_file: Path, node: Optional["Node"] = None) -> list[str]:
    args = ["-m", f"prime_rl.{name}", "--config", str(config_file)]
    # --standalone: torchrun hosts the rendezvous itself, on a free local port it picks; multi-node, the
    # node's rendezvous arguments (empty when the whole trainer is one process).
    rendezvous = node.torchrun if node else (["--standalone"] if trainer_procs(cfg) > 1 else [])
    if name == "trainer" and rendezvous:
        args = ["-m", "torch.distributed.run", *rendezvous, "--nproc-per-node", str(trainer_procs(cfg)), *args]
    return [sys.executable, *args]


def _vllm_role(
    cfg: Config,
    name: str,
    model: Path,
    served_name: str,
    port: int,
    gpus: list[str],
    lora_rank: int,
    run_dir: Path,
    node: Optional["Node"] = None,
) -> Role:
    command, env = vllm_command(cfg, model, served_name, port, gpus, lora_rank)
    return Role(
        name=name,
        command=command,
        env=env,
        gpus=gpus,
        log_file=log_file(run_dir, name, node.rank if node else None),
        config_file=run_dir / "configs" / f"{name}.yaml",
        port=port,
        health_url=f"http://127.0.0.1:{port}/health",
        server_key=True,
    )


def write_role_configs(plan: Plan) -> None:
    """Every role reads the same resolved config; one file per role so each can be rerun alone."""
    text = OmegaConf.to_yaml(OmegaConf.structured(plan.config))
    for role in plan.roles:
        role.config_file.parent.mkdir(parents=True, exist_ok=True)
        # Whole or not at all: multi-node, another node may be reading or writing the same file right now.
        tmp = role.config_file.with_name(f".{role.config_file.name}.{socket.gethostname()}.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, role.config_file)
