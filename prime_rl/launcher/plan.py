"""The process plan of one job: which roles run, with what command, environment, GPUs, port and log file.

The plan is pure data computed from the validated config; the dry run prints it, every launch writes it as JSON
beside the role configs (configs/plan.json: what tools and tests read), and the supervisor runs it.
"""

import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from omegaconf import OmegaConf

from prime_rl.config.layout import gpu_shares, is_colocated, on_gpu, pushes_weights, turns
from prime_rl.config.modes import run_modes
from prime_rl.config.schema import Config, TeacherKind
from prime_rl.config.teachers import (
    SERVER_ROLE,
    local_teachers,
    server_role,
    teacher_config,
    teacher_names,
    teacher_view,
)
from prime_rl.inference.server import vllm_command
from prime_rl.launcher.allocator import preload_env
from prime_rl.launcher.auto_dtype import with_auto_dtypes
from prime_rl.launcher.gpus import gpu_slices
from prime_rl.models import student_dir, teacher_dir
from prime_rl.protocol.atomic import write_text
from prime_rl.protocol.run_dir import RunDir
from prime_rl.protocol.servers import STUDENT_MODEL_NAME, TEACHER_MODEL_NAME

ROLES = ("inference", "teacher_inference", "orchestrator", "trainer")


@dataclass
class Role:
    """A process this launcher starts."""

    name: str  # inference | teacher_inference | orchestrator | trainer
    command: list[str]  # argv
    env: dict[str, str]  # additions to the launcher's environment
    gpus: list[str]  # CUDA_VISIBLE_DEVICES slice (empty: CPU)
    log_file: Path
    config_file: Path
    port: int | None = None  # servers only (0: the server binds a port of the kernel's choosing, read back)
    server_key: bool = False  # gets the run's server key: servers want it; the orchestrator, a pushing trainer send it
    withheld: tuple[str, ...] = ()  # env vars of the launcher this role does not inherit (secrets it never needs)

    @property
    def is_server(self) -> bool:
        """A server runs as long as the run; it is ready once it serves (orchestrator and trainer finish)."""
        return self.port is not None


@dataclass
class RemoteServer:
    """A server another node of the job starts, which this node waits for."""

    name: str  # <role>@<host>
    root: str  # http://host:port, ready when it serves /health and /v1/models
    log_file: Path  # where its node writes its log (the run dir is shared)
    rank: int = 0  # the node that runs it


@dataclass(frozen=True)
class Node:
    """Where a plan runs. One machine is a one-node layout: rank 0, every role, the head."""

    rank: int = 0  # index in the job's node list (SLURM_NODEID)
    hostname: str = "localhost"
    roles: tuple[str, ...] = ROLES  # the roles this node runs
    head: bool = True  # runs the orchestrator; the run ends when its roles end
    torchrun: tuple[str, ...] = ()  # multi-node: torchrun's rendezvous arguments for this node's trainer
    end_file: Path | None = None  # multi-node: the end of this attempt, for every node; None on one node

    @property
    def multi(self) -> bool:
        return self.end_file is not None


LOCAL = Node()


@dataclass
class Plan:
    run_dir: Path
    config: Config  # the resolved config every role reads (run dir filled in; multi-node: ports and URLs)
    roles: list[Role] = field(default_factory=list)
    node: Node = LOCAL
    remote_servers: list[RemoteServer] = field(default_factory=list)  # multi-node head: the other nodes' servers
    dtype_choice: str = ""  # what dtype=auto chose on this CPU node and why (launcher/auto_dtype.py); "": none auto
    # by opd teacher key: "tokens (why)" or "text (why)", resolved once the models are built (a dry run: none)
    teacher_alignment: dict[str, str] = field(default_factory=dict)

    @property
    def one_by_one(self) -> bool:
        """Start the roles one after another (servers first, each once it serves): the colocated GPU layout."""
        return is_colocated(self.config) and on_gpu(self.config)

    def role(self, name: str) -> Role:
        return next(r for r in self.roles if r.name == name)

    @property
    def marker(self) -> str:
        """What every process of this plan carries in RUN_ENV (multi-node: per node, as nodes may share a host)."""
        return str(self.run_dir) + (f"#node{self.node.rank}" if self.node.multi else "")

    @property
    def launcher_log(self) -> Path:
        return log_file(self.run_dir, "launcher", self.node)


def build_plan(cfg: Config, run_dir: Path, visible: list[str], node: Node = LOCAL) -> Plan:
    """The roles `node` runs (on one machine: every role of the job)."""
    run_dir = run_dir.resolve()
    cfg, dtype_choice = with_auto_dtypes(replace(cfg, run_dir=str(run_dir)))
    if cfg.inference.url:  # a standing student server (launcher/standing_server.py): used by the run, not started
        cfg = replace(cfg, inference=replace(cfg.inference, urls=[cfg.inference.url]))
    teachers = {server_role(name): name for name in local_teachers(cfg)}
    here = teachers if SERVER_ROLE in node.roles else {}  # the node that runs a teacher server runs them all
    slices = gpu_slices(cfg.deployment, visible, (*node.roles, *here), list(teachers))
    plan = Plan(run_dir, cfg, node=node, dtype_choice=dtype_choice)
    # only the orchestrator talks to the teachers, and to a standing student server (which a server of the run gets
    # the key of, as its own: launcher/supervisor.py run_server_key)
    secrets = teacher_secrets(cfg) + ((cfg.inference.api_key_env,) if cfg.inference.url else ())
    lora = cfg.trainer.lora
    if "inference" in node.roles and not cfg.inference.url:
        plan.roles.append(
            _vllm_role(
                plan,
                "inference",
                student_dir(cfg),
                STUDENT_MODEL_NAME,
                cfg.inference.port,
                slices["inference"],
                lora_rank=lora.rank if lora.enabled else 0,
            )
        )
    for role, name in here.items():
        view = teacher_view(cfg, name)
        plan.roles.append(
            _vllm_role(plan, role, teacher_dir(view), TEACHER_MODEL_NAME, view.teacher.port, slices[role], 0, view)
        )
    for name in [r for r in ("orchestrator", "trainer") if r in node.roles]:
        command = _module_command(cfg, name, RunDir(run_dir).config(name), node)
        env = {"CUDA_VISIBLE_DEVICES": ",".join(slices[name])} if visible else {}
        server_key = name == "orchestrator" or (name == "trainer" and pushes_weights(cfg))
        plan.roles.append(_role(plan, name, command, env, slices[name], server_key=server_key))
    for role in plan.roles:
        role.withheld = () if role.name == "orchestrator" else secrets
        if not role.gpus:
            role.env.update(preload_env(cfg.launcher.tcmalloc))
    return plan


def teacher_secrets(cfg: Config) -> tuple[str, ...]:
    """The env vars holding the external teachers' credentials (their keys, secret header values)."""
    teachers = [teacher_config(cfg, name) for name in teacher_names(cfg)]
    externals = [t for t in teachers if t.kind == TeacherKind.external]
    return tuple(env for t in externals for env in (t.api_key_env, *t.header_envs.values()) if env)


def trainer_procs(cfg: Config) -> int:
    """Trainer processes: one per trainer GPU, else trainer.num_procs on CPU."""
    return cfg.deployment.num_train_gpus or cfg.trainer.num_procs


def log_file(run_dir: Path, name: str, node: Node) -> Path:
    """The role's log; multi-node, one per node, since the nodes share the run dir."""
    return RunDir(run_dir).log(name, node.rank if node.multi else None)


def _module_command(cfg: Config, name: str, config_file: Path, node: Node) -> list[str]:
    args = ["-m", f"prime_rl.{name}", "--config", str(config_file)]
    # Multi-node: the node's rendezvous arguments. One node: --standalone, torchrun hosts the rendezvous itself
    # on a free local port; no torchrun at all when the whole trainer is one process.
    rendezvous = list(node.torchrun) or (["--standalone"] if trainer_procs(cfg) > 1 and not node.multi else [])
    if name == "trainer" and rendezvous:
        args = ["-m", "torch.distributed.run", *rendezvous, "--nproc-per-node", str(trainer_procs(cfg)), *args]
    return [sys.executable, *args]


def _vllm_role(
    plan: Plan,
    name: str,
    model: Path,
    served_name: str,
    port: int,
    gpus: list[str],
    lora_rank: int,
    view: Config | None = None,
) -> Role:
    """A vLLM server role; `view`: the config as a named teacher sees it (config/teachers.py), for its server."""
    cfg = view or plan.config
    command, env = vllm_command(cfg, model, served_name, port, gpus, lora_rank, student=name == "inference")
    return _role(plan, name, command, env, gpus, port=port, server_key=True)


def _role(plan: Plan, name: str, command: list[str], env: dict[str, str], gpus: list[str], **server) -> Role:
    """Role `name` of the plan's node, with its log and config file."""
    log, config = log_file(plan.run_dir, name, plan.node), RunDir(plan.run_dir).config(name)
    return Role(name, command, env, gpus, log_file=log, config_file=config, **server)


def write_role_configs(plan: Plan) -> None:
    """Every role reads the same resolved config; one file per role so each can be rerun alone. Written whole:
    multi-node, another node may be reading or writing the same file right now."""
    text = OmegaConf.to_yaml(OmegaConf.structured(plan.config))
    for role in plan.roles:
        write_text(role.config_file, text)
    write_text(plan_file(plan), json.dumps(plan_record(plan), indent=1) + "\n")


def plan_file(plan: Plan) -> Path:
    """configs/plan.json; multi-node, one per node: configs/plan.node<rank>.json."""
    name = f"plan.node{plan.node.rank}.json" if plan.node.multi else "plan.json"
    return RunDir(plan.run_dir).root / "configs" / name


def plan_record(plan: Plan) -> dict:
    """The plan as data: the modes, the layout (colocated: its turns and the servers' GPU shares), how weights
    reach the server (and which, when it stands), where a resumed run continues, and each role's command,
    environment additions, GPUs, port, log and config. Secrets are never in it: roles inherit them from the
    launcher's environment, which the record does not hold."""
    c = plan.config
    colocated = is_colocated(c)
    return {
        "modes": [mode.name for mode in run_modes(c)],
        "node": {"rank": plan.node.rank, "hostname": plan.node.hostname, "head": plan.node.head},
        "layout": "colocated" if colocated else "separate",
        "turns": [asdict(t) for t in turns(c)] if colocated else [],
        "gpu_shares": gpu_shares(c) if colocated and on_gpu(c) else {},
        "weights": c.inference.weight_transfer.value if pushes_weights(c) else "files",
        "dtype": {"trainer": c.trainer.dtype, "inference": c.inference.dtype, "auto": plan.dtype_choice},
        "teacher_alignment": plan.teacher_alignment,
        "standing_server": c.inference.url,  # the student server the run uses instead of starting one (None: its own)
        # the checkpoint a resumed run continues from (0: none yet), None for a fresh run (launcher/resume.py)
        "resume_from": (RunDir(plan.run_dir).latest_checkpoint() or 0) if c.ckpt.resume else None,
        "roles": [
            {k: getattr(r, k) for k in ("name", "command", "env", "gpus", "port")}
            | {"log": str(r.log_file), "config": str(r.config_file)}
            for r in plan.roles
        ],
        "remote_servers": [{"name": s.name, "root": s.root} for s in plan.remote_servers],
    }
