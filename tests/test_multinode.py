"""GPU deployments (issue 9): an 8-GPU node split between the roles, and multi-node jobs — every node's plan
(as the dry run shows it), the sbatch request, and the launchers of two nodes running one job together."""

import asyncio
import json
import pickle
import re
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from prime_rl.config import ConfigError, check_rules, compose_config, load_config
from prime_rl.inference.client import InferenceClient
from prime_rl.launcher.multinode import announce_end, build_node_plan, job_nodes, read_end, shared_server_key
from prime_rl.launcher.plan import ROLES, Node, Plan, RemoteServer, build_plan
from prime_rl.launcher.supervisor import run_plan
from prime_rl.orchestrator.students import StudentServers, student_client
from prime_rl.protocol.run_dir import RunDir
from tests.conftest import ROOT, launch_cmd, unused_port
from tests.test_config import TWO_LOCAL_TEACHERS, command_of, dry_run, role_of
from tests.test_slurm import needs_slurm
from tests.test_supervisor import DRIVER, assert_nothing_survives, make_plan, run_dir, standin  # noqa: F401

EIGHT = [str(i) for i in range(8)]
GPU_NODES = [
    "deployment=gpu",
    "deployment.num_infer_gpus=8",
    "deployment.num_train_gpus=8",
    "inference.tp=2",
    "inference.dp=4",
]


def flag(argv, name):
    return argv[argv.index(name) + 1]


def node_plans(tmp_path, overrides, hostnames):
    cfg = compose_config(overrides)
    check_rules(cfg, visible_gpus=8)
    return [build_node_plan(cfg, tmp_path, EIGHT, rank, hostnames) for rank in range(len(hostnames))]


def roles(plan: Plan):
    return [r.name for r in plan.roles]


@pytest.mark.integration
def test_eight_gpus_on_one_node_opd(tmp_path):
    """4 student inference (2 replicas x tp 2) / 3 trainer / 1 teacher: disjoint, contiguous, in that order."""
    plans = dry_run(
        tmp_path,
        "deployment=gpu",
        "training_mode=opd",
        "deployment.num_infer_gpus=4",
        "deployment.num_train_gpus=3",
        "deployment.num_teacher_gpus=1",
        "inference.tp=2",
        "inference.dp=2",
        cuda_visible=",".join(EIGHT),
    )
    inference, trainer, teacher = (command_of(plans, r) for r in ("inference", "trainer", "teacher_inference"))
    assert int(flag(inference, "--tensor-parallel-size")) * int(flag(inference, "--data-parallel-size")) == 4
    assert flag(teacher, "--tensor-parallel-size") == "1"
    assert trainer[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3"]
    slices = {r: ",".join(role_of(plans, r)["gpus"]) for r in ("inference", "trainer", "teacher_inference")}
    assert slices == {"inference": "0,1,2,3", "trainer": "4,5,6", "teacher_inference": "7"}
    assert role_of(plans, "orchestrator")["gpus"] == []
    for role, devices in slices.items():
        assert role_of(plans, role)["env"]["CUDA_VISIBLE_DEVICES"] == devices
    assert "--host 127.0.0.1" in " ".join(inference)  # one node: servers stay on loopback


def test_two_nodes_inference_then_trainer(tmp_path):
    inference_node, train_node = node_plans(
        tmp_path, [*GPU_NODES, "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"], ["gpu-a", "gpu-b"]
    )
    assert roles(inference_node) == ["inference"] and roles(train_node) == ["orchestrator", "trainer"]
    vllm = inference_node.role("inference")
    assert flag(vllm.command, "--host") == "0.0.0.0" and flag(vllm.command, "--port") == "10000"
    assert flag(vllm.command, "--tensor-parallel-size") == "2" and flag(vllm.command, "--data-parallel-size") == "4"
    assert vllm.gpus == EIGHT and vllm.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    trainer = train_node.role("trainer")
    assert trainer.command[1:13] == [
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--node-rank",
        "0",
        "--rdzv-endpoint",
        "gpu-b:10002",
        "--nproc-per-node",
        "8",
        "-m",
        "prime_rl.trainer",
    ]
    assert trainer.gpus == EIGHT  # a trainer node's slice starts at its first GPU
    assert train_node.config.inference.urls == ["http://gpu-a:10000/v1"]
    assert inference_node.config == train_node.config  # every node writes the same configs/<role>.yaml
    assert train_node.node.head and not inference_node.node.head
    [remote] = train_node.remote_servers  # the head waits for it before starting the orchestrator
    assert (remote.name, remote.root) == ("inference@gpu-a", "http://gpu-a:10000")
    assert trainer.log_file.name == "trainer.node1.log" and train_node.launcher_log.name == "launcher.node1.log"


def test_three_nodes_trainer_over_two_with_a_local_teacher(tmp_path):
    overrides = [
        *GPU_NODES,
        "deployment.num_infer_gpus=4",
        "inference.dp=2",
        "training_mode=opd",
        "deployment.num_teacher_gpus=4",
        "deployment.num_infer_nodes=1",
        "deployment.num_train_nodes=2",
    ]
    plans = node_plans(tmp_path, overrides, ["n0", "n1", "n2"])
    assert [roles(p) for p in plans] == [["inference", "teacher_inference"], ["orchestrator", "trainer"], ["trainer"]]
    assert plans[0].role("inference").gpus == EIGHT[:4] and plans[0].role("teacher_inference").gpus == EIGHT[4:]
    assert flag(plans[0].role("teacher_inference").command, "--port") == "10001"
    for rank, plan in ((0, plans[1]), (1, plans[2])):
        trainer = plan.role("trainer").command
        assert trainer[3:11] == [
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--rdzv-endpoint",
            "n1:10002",
            "--nproc-per-node",
            "8",
        ]
    cfg = plans[1].config
    assert cfg.inference.urls == ["http://n0:10000/v1"] and cfg.teacher.base_url == "http://n0:10001/v1"
    assert [s.name for s in plans[1].remote_servers] == ["inference@n0", "teacher_inference@n0"]
    assert plans[2].remote_servers == [] and not plans[2].node.head


def test_named_local_teachers_share_the_last_inference_node_each_on_its_own_gpus_and_port(tmp_path):
    overrides = [
        *GPU_NODES,
        "deployment.num_infer_gpus=4",
        "inference.dp=2",
        *TWO_LOCAL_TEACHERS,
        "deployment.num_teacher_gpus=4",
        "deployment.num_infer_nodes=1",
        "deployment.num_train_nodes=1",
    ]
    infer, head = node_plans(tmp_path, overrides, ["n0", "n1"])
    assert roles(infer) == ["inference", "teacher_inference", "teacher_inference_srt"]
    assert [infer.role(r).gpus for r in roles(infer)] == [EIGHT[:4], EIGHT[4:6], EIGHT[6:]]
    assert [flag(infer.role(r).command, "--port") for r in roles(infer)] == ["10000", "10001", "10003"]
    assert flag(infer.role("teacher_inference_srt").command, "--tensor-parallel-size") == "2"
    cfg = head.config
    assert cfg.teacher.base_url == "http://n0:10001/v1" and cfg.teachers["srt"].base_url == "http://n0:10003/v1"
    assert [s.name for s in head.remote_servers] == ["inference@n0", "teacher_inference@n0", "teacher_inference_srt@n0"]
    many = [f"{{name:sort,label:s{i},mode:opd,teacher:t{i}}}" for i in range(6)]  # and srt: 7
    with pytest.raises(ConfigError) as err:
        check_rules(
            compose_config(
                [
                    *overrides,
                    f"task.mix=[{{name:reverse,mode:opd}},{','.join(many)}]",
                    "++teachers={" + ",".join(f"t{i}:{{kind:local_vllm,model:tiny}}" for i in range(6)) + "}",
                    "deployment.num_teacher_gpus=7",
                ]
            ),
            visible_gpus=8,
        )
    assert err.value.keys == ["teachers", "deployment.num_infer_nodes"]


def test_one_gpu_trainer_node_runs_without_torchrun(tmp_path):
    cfg = compose_config(["deployment=gpu", "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"])
    train = build_node_plan(cfg, tmp_path, ["0"], 1, ["a", "b"]).role("trainer")
    assert train.command[1:3] == ["-m", "prime_rl.trainer"]


def test_two_jobs_sharing_a_node_get_disjoint_ports(tmp_path):
    """A job's ports come from its id, so two jobs on the same node do not collide; a set port still wins."""
    overrides = [*GPU_NODES, "training_mode=opd", "deployment.num_infer_nodes=1", "deployment.num_train_nodes=2"]
    cfg = compose_config(overrides)
    hosts = ["n0", "n1", "n2"]

    def ports(attempt: str, c=cfg) -> set[int]:
        plans = [build_node_plan(c, tmp_path, EIGHT, rank, hosts, attempt) for rank in range(3)]
        servers = {int(flag(r.command, "--port")) for r in plans[0].roles}
        rendezvous = {int(flag(p.role("trainer").command, "--rdzv-endpoint").split(":")[1]) for p in plans[1:]}
        return servers | rendezvous

    first, second = ports("4711.0"), ports("4712.0")
    assert len(first) == len(second) == 3 and not first & second
    assert ports("4711.1") == first  # a requeued attempt of the job keeps its ports
    assert max(first | second) < 32768  # below the kernel's ephemeral range
    pinned = replace(cfg, inference=replace(cfg.inference, port=9000))
    assert 9000 in ports("4711.0", pinned)


@pytest.mark.integration
def test_dry_run_prints_every_node_on_simulated_hosts(tmp_path):
    plans = dry_run(
        tmp_path,
        *GPU_NODES,
        "deployment.num_infer_nodes=1",
        "deployment.num_train_nodes=2",
        cuda_visible=",".join(EIGHT),
    )
    nodes = [(p["node"]["hostname"], [r["name"] for r in p["roles"]], p["node"]["head"]) for p in plans]
    assert nodes == [
        ("node0", ["inference"], False),
        ("node1", ["orchestrator", "trainer"], True),
        ("node2", ["trainer"], False),
    ]
    assert plans[1]["remote_servers"] == [{"name": "inference@node0", "root": "http://node0:10000"}]
    trainer = " ".join(plans[2]["roles"][0]["command"])
    assert "--node-rank 1 --rdzv-endpoint node1:10002" in trainer
    assert "--host 0.0.0.0 --port 10000" in " ".join(plans[0]["roles"][0]["command"])
    for role in ("inference", "orchestrator", "trainer"):
        assert load_config(tmp_path / "run" / "configs" / f"{role}.yaml").inference.urls == ["http://node0:10000/v1"]


def test_multi_node_rules():
    gpus = GPU_NODES[:3]
    check_rules(
        compose_config([*gpus, "deployment.num_infer_nodes=2", "deployment.num_train_nodes=1", "inference.tp=8"]),
        visible_gpus=8,
    )  # counts are per node
    with pytest.raises(ConfigError) as err:
        check_rules(compose_config([*gpus, "inference.tp=8", "deployment.num_infer_nodes=1"]), visible_gpus=8)
    assert err.value.keys == ["deployment.num_infer_nodes", "deployment.num_train_nodes"]
    with pytest.raises(ConfigError) as err:  # 9 GPUs asked per node, 8 visible
        check_rules(
            compose_config(
                [
                    *gpus,
                    "inference.tp=8",
                    "training_mode=opd",
                    "deployment.num_teacher_gpus=1",
                    "deployment.num_infer_nodes=1",
                    "deployment.num_train_nodes=1",
                ]
            ),
            visible_gpus=8,
        )
    assert err.value.keys == [f"deployment.num_{role}_gpus" for role in ("infer", "train", "teacher")]
    with pytest.raises(ConfigError) as err:  # one GPU per trainer node, but two nodes: two processes
        check_rules(
            compose_config(
                ["deployment=gpu", "lora=on", "deployment.num_infer_nodes=1", "deployment.num_train_nodes=2"]
            ),
            visible_gpus=1,
        )
    assert "trainer.lora.enabled" in err.value.keys


def test_weights_cross_nodes_by_gloo_but_nccl_stays_on_its_node():
    cpu_nodes = ["deployment=local", "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"]
    check_rules(compose_config([*cpu_nodes, "inference.weight_transfer=gloo"]), visible_gpus=0)
    with pytest.raises(ConfigError) as err:
        check_rules(
            compose_config(
                [*GPU_NODES[:3], "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1", "inference.tp=8"]
                + ["inference.weight_transfer=nccl"]
            ),
            visible_gpus=8,
        )
    assert err.value.keys == ["inference.weight_transfer", "deployment.num_infer_nodes"]


@needs_slurm
@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_a_jobs_compressed_node_list_gives_each_node_its_rank_without_scontrol(monkeypatch):
    """SLURM_JOB_NODELIST in SLURM's compressed form, expanded in its order (submitit's parser: no scontrol, which
    containers often lack); this node is SLURM_NODEID of them."""
    cfg = compose_config(["deployment=gpu", "deployment.num_infer_nodes=2", "deployment.num_train_nodes=2"])
    monkeypatch.setenv("PATH", "")  # no scontrol, nor anything else
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[01-03],cpu5")
    monkeypatch.setenv("SLURM_NODEID", "2")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert job_nodes(cfg) == ([2], ["gpu01", "gpu02", "gpu03", "cpu5"], "17.1")


NODE_KEYS = "[deployment.num_infer_nodes, deployment.num_train_nodes]"


@pytest.mark.slurm
def test_a_one_node_slurm_job_refuses_a_two_node_deployment(tmp_path):
    """Inside a real job the launcher reads its node list from SLURM: one node is not the two asked for."""
    two_nodes = launch_cmd(
        "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1", f"hydra.run.dir={tmp_path / 'run'}"
    )
    proc = subprocess.run(
        ["srun", "--nodes", "1", "--ntasks", "1", *two_nodes], capture_output=True, text=True, cwd=ROOT, timeout=100
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = [line for line in proc.stderr.splitlines() if not line.startswith("srun: ")]  # the catalogue's refusal
    assert line.startswith("error: ") and NODE_KEYS in line and "; fix: " in line, line
    assert not (tmp_path / "run" / "logs").exists()


@pytest.mark.integration
def test_slurm_dry_run_asks_for_the_nodes(tmp_path):
    run = subprocess.run(
        launch_cmd(
            "-m",
            "hydra/launcher=slurm_gpu",
            *GPU_NODES,
            "deployment.num_infer_nodes=1",
            "deployment.num_train_nodes=1",
            "trainer.optim.lr=1e-4,3e-4",
            "launcher.dry_run=true",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    submission = yaml.safe_load(run.stdout)
    sbatch = submission["sbatch"]
    assert len(submission["jobs"]) == 2 and (sbatch["nodes"], sbatch["tasks_per_node"]) == (2, 1)  # a launcher a node
    assert sbatch["gpus_per_node"] == 8  # per node: max(inference 8, trainer 8), not their sum
    assert not (tmp_path / "sweep").exists()


def test_single_node_plan_is_unchanged(tmp_path):
    plan = build_plan(compose_config([]), tmp_path, [])
    assert (
        not plan.node.multi
        and plan.node.roles == ROLES
        and plan.config.inference.urls == []
        and plan.config.inference.host == "127.0.0.1"
    )
    assert plan.launcher_log == tmp_path.resolve() / "logs" / "launcher.log"


# --- what the nodes share through the run dir ------------------------------------------------------------


def test_server_key_is_shared_and_private(tmp_path):
    key = shared_server_key(tmp_path)
    assert len(key) > 30 and shared_server_key(tmp_path) == key  # a second node (or attempt) reads the same
    assert stat.S_IMODE((tmp_path / "server_key").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server_key"]


def test_the_first_end_stays(tmp_path):
    nodes = [Node(rank, f"n{rank}", (), rank == 1, (), tmp_path / "nodes" / "end.7.0") for rank in range(3)]
    announce_end(nodes[0], 0)  # a non-head node finishing well says nothing
    assert read_end(nodes[1]) is None
    announce_end(nodes[2], 1)
    announce_end(nodes[1], 0)
    assert read_end(nodes[0]) == (2, 1)


def two_node_plans(run_dir: Path, server_exit: bool = False):
    """Node 0: a student server; node 1 (head): orchestrator and trainer, waiting for node 0's server."""
    end = run_dir / "nodes" / "end.1.0"
    port = unused_port()  # another node's server: the head knows its port from the job, not by asking
    infer = make_plan(run_dir, [standin(run_dir, "inference", "server", str(port))])
    if server_exit:  # a server that dies a moment after it served
        infer.roles[0] = standin(run_dir, "inference", "worker", "3", "1")
    infer.node = Node(0, "localhost", ("inference",), False, (), end)
    head = make_plan(
        run_dir,
        [
            standin(run_dir, "orchestrator", "worker", "60" if server_exit else "1", "0"),
            standin(run_dir, "trainer", "worker", "1", "0"),
        ],
    )
    remote = RemoteServer("inference@localhost", f"http://127.0.0.1:{port}", run_dir / "logs" / "inference.log")
    head.node = Node(1, "localhost", ("orchestrator", "trainer"), True, (), end)
    head.remote_servers = [remote] if not server_exit else []
    return infer, head


def outcome(run_dir: Path, rank: int) -> dict:
    """How node `rank`'s launcher ended its attempt (RunDir.outcome)."""
    return json.loads(RunDir(run_dir).outcome(rank).read_text())


def start_node(plan: Plan, tmp_path: Path) -> subprocess.Popen:
    path = tmp_path / f"plan{plan.node.rank}.pkl"
    path.write_bytes(pickle.dumps(plan))
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(path)], cwd=ROOT, stderr=subprocess.PIPE, text=True)


@pytest.mark.integration
@pytest.mark.slow
def test_two_node_launchers_run_one_job_and_end_together(run_dir, tmp_path):
    infer, head = two_node_plans(run_dir)
    node0 = start_node(infer, tmp_path)
    assert run_plan(head) == 0  # waited for node 0's server, then ran its workers
    _, err0 = node0.communicate(timeout=30)
    assert node0.returncode == 0, err0
    assert [outcome(run_dir, rank)["status"] for rank in (0, 1)] == ["finished", "finished"]
    assert read_end(head.node) == (1, 0)
    log1 = (run_dir / "logs" / "launcher.node1.log").read_text()
    assert re.search(r"inference@localhost ready after [\d.]+ s at http://127\.0\.0\.1:", log1)
    assert (run_dir / "logs" / "launcher.node0.log").exists() and (run_dir / "server_key").exists()
    assert_nothing_survives(run_dir, 3)


@pytest.mark.integration
@pytest.mark.slow
def test_a_failing_node_stops_the_others(run_dir, tmp_path):
    infer, head = two_node_plans(run_dir, server_exit=True)
    node0 = start_node(infer, tmp_path)
    assert run_plan(head) == 1  # its orchestrator would run a minute: node 0's failure ends it first
    node0.communicate(timeout=30)
    assert node0.returncode == 1 and read_end(head.node) == (0, 1)
    # the head records what node 0 recorded: the role that failed there, not only the node
    assert outcome(run_dir, 0)["role"] == outcome(run_dir, 1)["role"] == "inference"
    assert outcome(run_dir, 1)["reason"] == outcome(run_dir, 0)["reason"] + " (reported by node 0)"
    assert_nothing_survives(run_dir, 3)


class RecordingServer:
    """Stands in for one student server's client: answers with its name, records what it was asked."""

    def __init__(self, name: str):
        self.name, self.base_url, self.asked = name, f"http://{name}:8000/v1", []

    async def complete(self, model, prompts, n, sampling):
        self.asked.append([p[0] for p in prompts])
        return [[f"{self.name}:{p[0]}"] * n for p in prompts]

    async def reload_weights(self, weights_dir):
        self.asked.append(weights_dir)


def test_several_student_servers_share_requests_and_all_reload():
    a, b = RecordingServer("a"), RecordingServer("b")
    servers = StudentServers([a, b])
    assert asyncio.run(servers.complete("student", [[1], [2], [3]], 2, None)) == [["a:1"] * 2, ["b:2"] * 2, ["b:3"] * 2]
    singles = [asyncio.run(servers.complete("student", [[i]], 1, None))[0][0] for i in (4, 5, 6, 7)]
    # one-prompt requests (evaluation) alternate between the servers
    assert [x.split(":")[0] for x in singles] in (list("abab"), list("baba"))
    asyncio.run(servers.reload_weights("/weights/step_1"))
    assert a.asked[-1] == b.asked[-1] == "/weights/step_1"


def test_one_student_url_is_one_plain_client():
    cfg = compose_config([])
    assert isinstance(student_client(replace(cfg, inference=replace(cfg.inference, port=8000))), InferenceClient)
    several = replace(cfg, inference=replace(cfg.inference, urls=["http://n0:8000/v1", "http://n1:8000/v1"]))
    assert student_client(several).base_url == "http://n0:8000/v1, http://n1:8000/v1"
