"""Multi-node jobs (`deployment.num_infer_nodes` / `num_train_nodes` > 0): one SLURM job, one launcher task
per node, each taking its roles by its node rank (SLURM_NODEID).

    nodes 0 .. I-1       a student vLLM server each (`num_infer_gpus` GPUs); on node I-1 also the local
                         teachers' servers, on the `num_teacher_gpus` GPUs after the student's (split evenly)
    nodes I .. I+T-1     the trainer, one torchrun node each (`num_train_gpus` processes); node I, the head,
                         also runs the orchestrator

The nodes agree without talking to each other: every plan is a pure function of (config, rank, hostnames,
job id); ports come from the job id (job_ports; inference.port and a teacher's port, when set, win), so two jobs
sharing a node do not collide; the servers bind all interfaces, and the orchestrator gets their URLs from
SLURM's node list. Two files in the shared run dir do the rest: the server key (`server_key`, mode 0600,
written once by whichever node comes first) and the end of the run (`nodes/end.<job>.<attempt>`: the head
writes it when the run is over, any node that fails writes it first; every node stops when it appears).
"""

import os
import secrets
from dataclasses import replace
from pathlib import Path

from prime_rl.config.schema import Config, num_nodes
from prime_rl.config.teachers import (
    DEFAULT,
    MULTI_NODE_NAMED_LOCAL_TEACHERS,
    SERVER_ROLE,
    local_teachers,
    server_role,
    teacher_config,
    with_teacher,
)
from prime_rl.config.user_error import ConfigError
from prime_rl.launcher.plan import Node, Plan, RemoteServer, build_plan, trainer_procs
from prime_rl.protocol.atomic import write_once
from prime_rl.protocol.run_dir import RunDir

# Every node must know the ports without asking, and two jobs on one node must not share them: a job's ports
# (job_ports) are a slot picked by its job id, below Linux's ephemeral range (32768+) so that no port the kernel
# hands out to a client or a `--port 0` server takes them.
PORT_BASE, PORTS_PER_JOB = 10000, 3 + MULTI_NODE_NAMED_LOCAL_TEACHERS
PORT_SLOTS = (32768 - PORT_BASE) // PORTS_PER_JOB
BIND_ALL = "0.0.0.0"  # servers answer the other nodes; the server key still guards /v1


def is_multi_node(cfg: Config) -> bool:
    return num_nodes(cfg.deployment) > 1


def node_roles(cfg: Config, rank: int) -> list[str]:
    """The roles of node `rank`; `teacher_inference` stands for every local teacher's server (launcher/plan.py)."""
    infer = cfg.deployment.num_infer_nodes
    if rank < infer:
        return ["inference", SERVER_ROLE] if rank == infer - 1 and local_teachers(cfg) else ["inference"]
    return ["orchestrator", "trainer"] if rank == infer else ["trainer"]


def job_ports(job_id: int) -> list[int]:
    """The ports of a multi-node job: student server, default teacher's server, torchrun's rendezvous, then one
    per named local teacher."""
    base = PORT_BASE + PORTS_PER_JOB * (job_id % PORT_SLOTS)
    return list(range(base, base + PORTS_PER_JOB))


def multi_node_config(cfg: Config, hostnames: list[str], job_id: int) -> Config:
    """The config every node writes and every role reads (identical on all nodes): the job's ports, servers on
    all interfaces, the orchestrator given the student servers' and the local teachers' URLs."""
    infer_hosts = hostnames[: cfg.deployment.num_infer_nodes]
    ports = job_ports(job_id)
    port = cfg.inference.port or ports[0]
    inference = replace(cfg.inference, host=BIND_ALL, port=port, urls=[f"http://{h}:{port}/v1" for h in infer_hosts])
    cfg = replace(cfg, inference=inference)
    named = [name for name in local_teachers(cfg) if name != DEFAULT]
    for name in local_teachers(cfg):
        teacher = teacher_config(cfg, name)
        port = teacher.port or (ports[1] if name == DEFAULT else ports[3 + named.index(name)])
        cfg = with_teacher(cfg, name, replace(teacher, port=port, base_url=f"http://{infer_hosts[-1]}:{port}/v1"))
    return cfg


def rendezvous(cfg: Config, hostnames: list[str], rank: int, job_id: int) -> list[str]:
    """torchrun's arguments on trainer node `rank`. The static rendezvous (torchrun's default) takes the node
    rank as given, so the trainer's rank 0 runs on the head node, next to the orchestrator."""
    d = cfg.deployment
    if rank < d.num_infer_nodes or trainer_procs(cfg) * d.num_train_nodes == 1:
        return []
    head = f"{hostnames[d.num_infer_nodes]}:{job_ports(job_id)[2]}"
    return ["--nnodes", str(d.num_train_nodes), "--node-rank", str(rank - d.num_infer_nodes), "--rdzv-endpoint", head]


def build_node_plan(
    cfg: Config, run_dir: Path, visible: list[str], rank: int, hostnames: list[str], attempt: str = "0"
) -> Plan:
    """The plan of node `rank` of a multi-node job whose nodes are `hostnames` (in SLURM's order); `attempt` is
    <job id>.<restart count>."""
    job_id = int(attempt.split(".")[0])
    cfg = multi_node_config(cfg, hostnames, job_id)
    node = Node(
        rank=rank,
        hostname=hostnames[rank],
        roles=tuple(node_roles(cfg, rank)),
        head=rank == cfg.deployment.num_infer_nodes,
        torchrun=tuple(rendezvous(cfg, hostnames, rank, job_id)),
        end_file=RunDir(run_dir.resolve()).end_marker(attempt),
    )
    plan = build_plan(cfg, run_dir, visible, node)
    if node.head:
        plan.remote_servers = remote_servers(plan.config, plan.run_dir, hostnames)
    return plan


def remote_servers(cfg: Config, run_dir: Path, hostnames: list[str]) -> list[RemoteServer]:
    """The servers of the other nodes, as the head sees them: where to check that they serve, their logs."""
    servers = []
    for rank in range(cfg.deployment.num_infer_nodes):
        host = hostnames[rank]
        ports = {"inference": cfg.inference.port}
        if SERVER_ROLE in node_roles(cfg, rank):
            ports |= {server_role(name): teacher_config(cfg, name).port for name in local_teachers(cfg)}
        for name, port in ports.items():
            log = RunDir(run_dir).log(name, rank)
            servers.append(RemoteServer(f"{name}@{host}", f"http://{host}:{port}", log, rank))
    return servers


# --- which node am I (inside a SLURM job) -------------------------------------------------------------------


def job_nodes(cfg: Config) -> tuple[list[int], list[str], str]:
    """(ranks to plan here, the job's hostnames, the attempt id). Inside a SLURM job of the deployment's size:
    this node's rank. Otherwise, for a dry run: every node, on simulated hosts node0 .. nodeN-1; for a real
    run, a ConfigError."""
    n = num_nodes(cfg.deployment)
    hostnames = slurm_hostnames() if "SLURM_JOB_ID" in os.environ else []
    if len(hostnames) == n:
        attempt = f"{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_RESTART_COUNT', '0')}"
        return [int(os.environ["SLURM_NODEID"])], hostnames, attempt
    if cfg.launcher.dry_run:
        return list(range(n)), [f"node{k}" for k in range(n)], "0"
    here = f" (this SLURM job has {len(hostnames)})" if hostnames else ""
    raise ConfigError(
        ["deployment.num_infer_nodes", "deployment.num_train_nodes"],
        f"a multi-node deployment runs inside a SLURM job of {n} nodes{here}, one task per node",
        "submit it with -m hydra/launcher=slurm_gpu (or srun one task per node with a shared hydra.run.dir), "
        "or see every node's plan with launcher.dry_run=true",
    )


def nodes_of_job(cfg: Config) -> tuple[list[int], list[str], str] | None:
    """A multi-node job's (ranks to plan here, the job's hostnames, the attempt id); None on one node."""
    return job_nodes(cfg) if is_multi_node(cfg) else None


def lock_name(cfg: Config) -> str:
    """The run dir's lock file of this launcher: one per node in a multi-node SLURM job."""
    if is_multi_node(cfg) and "SLURM_NODEID" in os.environ:
        return f"launcher.node{os.environ['SLURM_NODEID']}.lock"
    return "launcher.lock"


def slurm_hostnames() -> list[str]:
    """The job's nodes in SLURM's order (the order of SLURM_NODEID), expanded from SLURM_JOB_NODELIST by submitit's
    parser (no `scontrol` at job time: containers often lack it)."""
    from submitit.slurm.slurm import SlurmJobEnvironment

    return SlurmJobEnvironment().hostnames


# --- what the nodes share through the run dir ---------------------------------------------------------------


def shared_server_key(run_dir: Path) -> str:
    """The run's server key, the same on every node: the first node to get here writes it (mode 0600), the
    others read it. A requeued attempt keeps it."""
    return write_once(RunDir(run_dir).server_key, secrets.token_urlsafe(32), mode=0o600).strip()


def announce_end(node: Node, code: int) -> None:
    """The head ends the run for every node; any node that fails ends it too. The first word stays."""
    if node.multi and (node.head or code):
        write_once(node.end_file, f"{node.rank} {code}\n")


def read_end(node: Node) -> tuple[int, int] | None:
    """(the rank that ended the run, its exit code), or None while the run goes on."""
    return read_end_marker(node.end_file)


def read_end_marker(path: Path) -> tuple[int, int] | None:
    try:
        rank, code = path.read_text().split()
    except (FileNotFoundError, ValueError):
        return None
    return int(rank), int(code)


def peer_failure(plan: Plan) -> tuple[str, Path, str] | None:
    """(name, log, why) of what failed on another node and so ended the run: the role its launcher recorded (it
    records before it ends the run), else the node itself."""
    end = read_end(plan.node) if plan.node.multi else None
    if end is None or end[1] == 0 or end[0] == plan.node.rank:
        return None
    rank, run_dir = end[0], RunDir(plan.run_dir)
    outcome = run_dir.read_outcome(rank)
    if outcome.get("status") == "failed":
        return outcome["role"], Path(outcome["log"]), f"{outcome['reason']} (reported by node {rank})"
    return f"node {rank}", run_dir.log("launcher", rank), "failed"


def run_over(plan: Plan) -> bool:
    """Whether this node may end: always on the head (one node is its own head); elsewhere once the head says so."""
    return plan.node.head or read_end(plan.node) is not None
