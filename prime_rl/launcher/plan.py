"""The process plan of one job: which roles run, with what command, environment, GPUs, port and log file.

The plan is pure data computed from the validated config; the dry run prints it and the supervisor runs it.
"""

import socket
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import OmegaConf

from prime_rl.config.schema import Config, TeacherKind
from prime_rl.inference.server import STUDENT_MODEL_NAME, TEACHER_MODEL_NAME, vllm_command
from prime_rl.launcher.gpus import gpu_slices
from prime_rl.models import student_dir, teacher_dir


@dataclass
class Role:
    name: str  # inference | teacher_inference | orchestrator | trainer
    command: List[str]  # argv
    env: Dict[str, str]  # additions to the launcher's environment
    gpus: List[str]  # CUDA_VISIBLE_DEVICES slice (empty: CPU)
    log_file: Path
    config_file: Path
    port: Optional[int] = None  # servers only
    health_url: Optional[str] = None  # servers only: ready when this answers 200


@dataclass
class Plan:
    run_dir: Path
    config: Config  # the resolved config every role reads (ports filled in)
    roles: List[Role] = field(default_factory=list)

    def role(self, name: str) -> Role:
        return next(r for r in self.roles if r.name == name)


def free_port(taken: set) -> int:
    """A port nobody listens on now and that this plan has not handed out."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def build_plan(cfg: Config, run_dir: Path, visible: List[str]) -> Plan:
    run_dir = run_dir.resolve()
    taken: set = set()
    has_teacher_server = cfg.teacher.kind == TeacherKind.local_vllm
    cfg = replace(
        cfg,
        run_dir=str(run_dir),
        inference=replace(cfg.inference, port=cfg.inference.port or free_port(taken)),
        teacher=replace(cfg.teacher, port=(cfg.teacher.port or free_port(taken)) if has_teacher_server else 0),
    )
    slices = gpu_slices(cfg.deployment, visible)
    plan = Plan(run_dir, cfg)
    lora = cfg.trainer.lora
    plan.roles.append(
        _vllm_role(cfg, "inference", student_dir(cfg), STUDENT_MODEL_NAME, cfg.inference.port, slices["inference"],
                   lora_rank=lora.rank if lora.enabled else 0, run_dir=run_dir)
    )
    if has_teacher_server:
        plan.roles.append(
            _vllm_role(cfg, "teacher_inference", teacher_dir(cfg), TEACHER_MODEL_NAME, cfg.teacher.port,
                       slices["teacher_inference"], lora_rank=0, run_dir=run_dir)
        )
    for name in ("orchestrator", "trainer"):
        config_file = run_dir / "configs" / f"{name}.yaml"
        plan.roles.append(
            Role(
                name=name,
                command=[sys.executable, "-m", f"prime_rl.{name}", "--config", str(config_file)],
                env={"CUDA_VISIBLE_DEVICES": ",".join(slices[name])} if visible else {},
                gpus=slices[name],
                log_file=run_dir / "logs" / f"{name}.log",
                config_file=config_file,
            )
        )
    return plan


def _vllm_role(cfg: Config, name: str, model: Path, served_name: str, port: int, gpus: List[str],
               lora_rank: int, run_dir: Path) -> Role:
    command, env = vllm_command(cfg, model, served_name, port, gpus, lora_rank)
    return Role(
        name=name,
        command=command,
        env=env,
        gpus=gpus,
        log_file=run_dir / "logs" / f"{name}.log",
        config_file=run_dir / "configs" / f"{name}.yaml",
        port=port,
        health_url=f"http://127.0.0.1:{port}/health",
    )


def write_role_configs(plan: Plan) -> None:
    """Every role reads the same resolved config; one file per role so each can be rerun alone."""
    text = OmegaConf.to_yaml(OmegaConf.structured(plan.config))
    for role in plan.roles:
        role.config_file.parent.mkdir(parents=True, exist_ok=True)
        role.config_file.write_text(text)
