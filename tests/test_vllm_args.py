"""The servers' command lines as vLLM reads them: every server the launcher plans (CPU and GPU, each mode, LoRA,
pushed weights, several teachers, several nodes) parses with vLLM's own parser into its engine arguments; a LoRA
rank vLLM does not list is served at the next one it does; a tensor parallelism the model's attention heads do not
split over is refused before anything starts; the tool parser names the launcher checks a task against are vLLM's."""

import importlib.util
import os
import sys
import typing

import pytest
from transformers import AutoConfig

from prime_rl.config import ConfigError, check_rules, compose_config
from prime_rl.config.schema import VLLM_LORA_RANKS, VLLM_MAX_NUM_SEQS
from prime_rl.inference import cpu_platform
from prime_rl.inference.entrypoint import SERVER_MODULE
from prime_rl.inference.server import attention_heads, tensor_parallel_fits
from prime_rl.launcher.multinode import build_node_plan
from prime_rl.launcher.plan import build_plan
from prime_rl.models.tokenizer import build_tokenizer
from prime_rl.tasks.gym_env import check_env, vllm_tool_parser_names
from tests.test_config import TWO_LOCAL_TEACHERS, check

EIGHT = [str(i) for i in range(8)]
GPU_OPD = ["deployment=gpu", "experiment=opd", "deployment.num_teacher_gpus=2"]
SPLIT_RULE = "vLLM needs the GPUs to divide the heads, and to divide or be a multiple of the KV heads"

# (overrides, visible GPUs, nodes): every kind of server command line the launcher writes
PLANS = {
    "cpu rl": ([], [], 0),
    "cpu opd": (["experiment=opd"], [], 0),
    "cpu opd topk": (["experiment=opd", "trainer.loss.distill=topk"], [], 0),
    "cpu sft tool calls": (["experiment=sft", "task=lookup"], [], 0),
    "cpu opd lora": (["experiment=opd_lora"], [], 0),
    "cpu lora rank 12": (["lora=on", "trainer.lora.rank=12"], [], 0),
    "cpu lora embeddings": (["model=tiny_qwen3", "lora=embeddings"], [], 0),
    "cpu gloo push": (["inference.weight_transfer=gloo"], [], 0),
    "cpu colocated opd": (["deployment=colocated", "experiment=opd"], [], 0),
    "cpu served reference": (["trainer.loss.kl_ref_tau=0.05", "trainer.loss.kl_ref_from=vllm"], [], 0),
    "cpu several teachers": (TWO_LOCAL_TEACHERS, [], 0),
    "gpu opd": (GPU_OPD, EIGHT, 0),
    "gpu nccl push": (["deployment=gpu", "inference.weight_transfer=nccl"], EIGHT, 0),
    "gpu tp dp": (["deployment=gpu", "deployment.num_infer_gpus=4", "inference.tp=2", "inference.dp=2"], EIGHT, 0),
    "gpu lora rank 12": (["deployment=gpu", "lora=on", "trainer.lora.rank=12"], EIGHT, 0),
    "gpu sft tool calls": (
        ["deployment=gpu", "experiment=sft", "task=lookup", "deployment.num_teacher_gpus=1"],
        EIGHT,
        0,
    ),
    "gpu several teachers": ([*TWO_LOCAL_TEACHERS, "deployment=gpu", "deployment.num_teacher_gpus=4"], EIGHT, 0),
    "colocated gpu opd": (["deployment=colocated_gpu", "experiment=opd"], ["0"], 0),
    "colocated gpu lora": (["deployment=colocated_gpu", "lora=on", "trainer.lora.rank=12"], ["0"], 0),
    "two gpu nodes opd": (
        [*GPU_OPD, "deployment.num_infer_gpus=4", "inference.tp=2", "inference.dp=2"]
        + ["deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"],
        EIGHT,
        2,
    ),
}


def planned_servers(overrides: list[str], visible: list[str], nodes: int, tmp_path) -> list:
    """The server roles of the launcher's own plan (every node's), of a config its rules accept."""
    cfg = compose_config(overrides)
    check_rules(cfg, len(visible))
    if not nodes:
        plans = [build_plan(cfg, tmp_path, visible)]
    else:
        hosts = [f"node{rank}" for rank in range(nodes)]
        plans = [build_node_plan(cfg, tmp_path, visible, rank, hosts) for rank in range(nodes)]
    return [role for plan in plans for role in plan.roles if role.is_server]


@pytest.fixture(scope="module")
def vllm_cli():
    """vLLM's `serve` parser, its check of the parsed arguments and its engine arguments (as its server builds them)."""
    pytest.importorskip("vllm")
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser()), validate_parsed_serve_args, AsyncEngineArgs


@pytest.mark.integration  # importing vLLM's server starts a process (py-cpuinfo runs `file`)
@pytest.mark.parametrize("name", PLANS)
def test_every_planned_server_command_line_parses_with_vllms_own_parser(name, vllm_cli, tmp_path, capsys):
    parser, validate, engine_args = vllm_cli
    servers = planned_servers(*PLANS[name], tmp_path)
    assert servers
    for role in servers:
        assert role.command[:3] == [sys.executable, "-m", SERVER_MODULE]
        try:
            args = parser.parse_args(role.command[3:])
        except SystemExit:
            error = capsys.readouterr().err.strip().splitlines()[-1]  # argparse's usage, then its error
            pytest.fail(f"vLLM refuses the {role.name} server's command line: {error}")
        validate(args)
        engine = engine_args.from_cli_args(args)
        assert engine.model == role.command[role.command.index("--model") + 1]
        # the server spreads over exactly the GPUs the plan gives it (the CPU build: one process)
        assert engine.tensor_parallel_size * engine.data_parallel_size == max(len(role.gpus), 1), role.name
        assert not engine.enable_lora or engine.max_lora_rank in VLLM_LORA_RANKS
        # a CPU server's engine process is forked (inference/cpu_platform.py); a GPU one's vLLM starts as it decides
        assert (role.env.get(cpu_platform.ENV_VAR) == "1") == (not role.gpus), role.name
    assert importlib.util.find_spec(SERVER_MODULE) is not None


@pytest.mark.integration  # importing vLLM's server starts a process (py-cpuinfo runs `file`)
def test_vllm_resolves_the_forking_cpu_platform_only_where_the_launcher_asks(vllm_cli, monkeypatch):
    from vllm.platforms import resolve_current_platform_cls_qualname
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils.import_utils import resolve_obj_by_qualname

    monkeypatch.setenv(cpu_platform.ENV_VAR, "1")  # through the installed entry point (setup.cfg)
    forking = resolve_obj_by_qualname(resolve_current_platform_cls_qualname())
    assert issubclass(forking, CpuPlatform) and forking is not CpuPlatform
    monkeypatch.setenv(cpu_platform.ENV_VAR, "0")
    assert resolve_obj_by_qualname(resolve_current_platform_cls_qualname()) is CpuPlatform


@pytest.mark.integration  # importing vLLM's server starts a process (py-cpuinfo runs `file`)
def test_the_lora_ranks_are_vllms_own():
    pytest.importorskip("vllm")
    from vllm.config.lora import MaxLoRARanks

    assert VLLM_LORA_RANKS == typing.get_args(MaxLoRARanks)


# the CPU plans whose engine config vLLM builds here, on the models the run serves (built, or cached by the suite's
# runs); left out: "cpu sft tool calls" and "cpu several teachers", whose teachers take minutes to build for this
# alone and whose command lines add only a tool parser (checked by vLLM's parser above) and a second teacher
ENGINE_BUILT = [
    name for name in PLANS if name.startswith("cpu") and name not in ("cpu sft tool calls", "cpu several teachers")
]


@pytest.fixture
def own_environ():
    """vLLM's CPU platform writes this process's environment while it builds an engine config (LD_PRELOAD gets torch's
    libgomp, KMP_* and more): restored afterwards, or every process a later test starts here would inherit it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.integration  # building the engine config inspects the model in a subprocess
@pytest.mark.parametrize("name", ENGINE_BUILT)
def test_vllm_builds_the_engine_config_of_every_planned_cpu_server_with_its_own_checks(
    name, vllm_cli, tmp_path, own_environ
):
    """Beyond parsing: vLLM's create_engine_config() runs its own rules on what the plan asks (the scheduler's batch
    against the context, LoRA's ranks, the weight-transfer backend, the platform's), on the models the run serves."""
    from prime_rl.launcher.job import prepared

    parser, validate, engine_args = vllm_cli
    overrides, visible, nodes = PLANS[name]
    prepared(compose_config(overrides))  # the run's models, built (cached) as the launcher's job builds them
    for role in planned_servers(overrides, visible, nodes, tmp_path):
        engine = engine_args.from_cli_args(parser.parse_args(role.command[3:]))
        config = engine.create_engine_config()
        assert config.model_config.max_model_len == int(role.command[role.command.index("--max-model-len") + 1])
        assert config.scheduler_config.max_num_batched_tokens >= config.scheduler_config.max_num_seqs


@pytest.mark.integration  # importing vLLM's engine arguments starts a process (py-cpuinfo runs `file`)
def test_the_smallest_batch_a_gpu_server_takes_is_vllms_own(monkeypatch):
    """VLLM_MAX_NUM_SEQS is vLLM's --max-num-seqs on a 70 GB+ GPU (an H100, an H200): what the rule on a scoring
    server's --max-num-batched-tokens holds a value set by hand against."""
    pytest.importorskip("vllm")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    monkeypatch.setattr(current_platform, "get_device_total_memory", lambda *_: 80 * 2**30)
    monkeypatch.setattr(current_platform, "get_device_name", lambda *_: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(current_platform, "is_cpu", lambda: False)
    _, max_num_seqs = EngineArgs.get_batch_defaults(world_size=1)
    assert max_num_seqs[UsageContext.OPENAI_API_SERVER] == VLLM_MAX_NUM_SEQS


def test_a_scoring_servers_batch_below_vllms_sequences_is_one_line():
    for key, fix in [("teacher", "teacher.max_num_batched_tokens"), ("inference", "inference.max_num_batched_tokens")]:
        with pytest.raises(ConfigError) as err:
            check_rules(compose_config([*GPU_OPD, f"{key}.max_num_batched_tokens=512"]), 8)
        assert err.value.keys == [fix] and "below vLLM's 1024 sequences per batch" in str(err.value)
    check_rules(
        compose_config([*GPU_OPD, "teacher.max_num_batched_tokens=512", "teacher.extra_args=[--max-num-seqs,256]"]), 8
    )
    check_rules(compose_config([*GPU_OPD, "teacher.max_num_batched_tokens=1024"]), 8)


def max_lora_rank(tmp_path, *overrides: str) -> str:
    [server] = planned_servers(["lora=on", *overrides], [], 0, tmp_path)
    return server.command[server.command.index("--max-lora-rank") + 1]


def test_a_lora_rank_vllm_does_not_list_is_served_at_the_next_one_it_does(tmp_path):
    assert max_lora_rank(tmp_path, "trainer.lora.rank=12") == "16"
    assert max_lora_rank(tmp_path, "trainer.lora.rank=8") == "8"
    assert max_lora_rank(tmp_path, "trainer.lora.rank=321") == "512"
    assert compose_config(["lora=on", "trainer.lora.rank=12"]).trainer.lora.rank == 12  # the adapter keeps its own


def test_a_lora_rank_above_vllms_largest_is_one_line():
    with pytest.raises(ConfigError) as err:
        check_rules(compose_config(["lora=on", "trainer.lora.rank=600"]), 0)
    assert str(err.value) == (
        "invalid config [trainer.lora.rank]: must be <= 512, got 600; fix: give it a value <= 512, e.g. its default 8"
    )


def test_vllms_tensor_parallel_split_of_the_attention_heads():
    assert tensor_parallel_fits(14, 2, 2) and tensor_parallel_fits(14, 2, 14)
    assert not tensor_parallel_fits(14, 2, 4)  # the heads do not split
    assert tensor_parallel_fits(8, 2, 4)  # each KV head replicated on two GPUs
    assert not tensor_parallel_fits(12, 3, 2)  # 3 KV heads neither split over 2 GPUs nor replicate onto them
    assert tensor_parallel_fits(12, 3, 6)


def model_dir(tmp_path, name: str, heads: int, kv_heads: int):
    """A model dir's config.json, as Hugging Face writes it, and the built-in student's tokenizer (no weights: the
    checks read only the config, and an opd teacher's tokenizer where the student is built already)."""
    path = tmp_path / name
    config = AutoConfig.for_model(
        "qwen2", num_attention_heads=heads, num_key_value_heads=kv_heads, hidden_size=32 * heads
    )
    config.save_pretrained(path)
    build_tokenizer().save_pretrained(path, save_jinja_files=False)
    return path


def test_a_model_dirs_heads_are_read_as_vllm_reads_them(tmp_path):
    assert attention_heads(model_dir(tmp_path, "gqa", 14, 2)) == (14, 2)
    (tmp_path / "mha").mkdir()
    (tmp_path / "mha" / "config.json").write_text('{"text_config": {"num_attention_heads": 12}}')
    assert attention_heads(tmp_path / "mha") == (12, 12)  # a multimodal model's text, every head its own KV head


def test_a_teachers_gpu_share_its_heads_do_not_split_over_is_refused_at_launch(tmp_path):
    teacher = model_dir(tmp_path, "teacher", 14, 2)
    opd = ["training_mode=opd", "teacher=local_vllm", f"teacher.model={teacher}"]
    with pytest.raises(ConfigError) as err:
        check([*opd, "deployment=gpu", "deployment.num_teacher_gpus=4"], visible_gpus=6)
    assert str(err.value) == (
        "invalid config [teacher.model, deployment.num_teacher_gpus]: teacher's server splits "
        f"{teacher}'s 14 attention heads (2 KV heads) over its 4 GPUs; {SPLIT_RULE}; fix: give each local teacher "
        "a number of GPUs that splits them (1, 2, 14): deployment.num_teacher_gpus=2"
    )
    check([*opd, "deployment=gpu", "deployment.num_teacher_gpus=2"], visible_gpus=4)
    check([*opd, "deployment=colocated_gpu"], visible_gpus=1)  # the student's one GPU


def test_a_named_teachers_share_is_checked_against_its_own_model(tmp_path):
    def named(heads: int) -> list[str]:
        srt = model_dir(tmp_path, f"srt{heads}", heads, heads)
        return [*TWO_LOCAL_TEACHERS, f"++teachers.srt.model={srt}", "deployment=gpu", "deployment.num_teacher_gpus=4"]

    with pytest.raises(ConfigError) as err:  # 2 GPUs each: the built-in teacher's 4 heads split, srt's 3 do not
        check(named(3), visible_gpus=6)
    assert err.value.keys == ["teachers.srt.model", "deployment.num_teacher_gpus"]
    assert "over its 2 GPUs (num_teacher_gpus split between 2 local teachers)" in err.value.problem
    assert err.value.fix.endswith("(1, 3): deployment.num_teacher_gpus=2")
    check(named(6), visible_gpus=6)


def test_a_student_tp_its_heads_do_not_split_over_is_refused_at_launch():
    gpu = ["deployment=gpu", "deployment.num_infer_gpus=3", "inference.tp=3"]
    with pytest.raises(ConfigError) as err:
        check(gpu, visible_gpus=4)
    assert str(err.value) == (
        "invalid config [inference.tp, model.name]: the student server splits tiny's 4 attention heads (2 KV heads) "
        f"over inference.tp=3 GPUs; {SPLIT_RULE}; fix: use inference.tp=2 (or another of 1, 2, 4), and "
        "inference.dp * inference.tp = deployment.num_infer_gpus"
    )
    check(["deployment=gpu", "deployment.num_infer_gpus=4", "inference.tp=4"], visible_gpus=5)  # KV heads replicated


@pytest.mark.integration  # importing vLLM's server starts a process (py-cpuinfo runs `file`)
def test_the_tool_parser_names_the_launcher_reads_without_importing_vllm_are_vllms_own():
    from vllm.tool_parsers import ToolParserManager

    assert vllm_tool_parser_names() == ToolParserManager.list_registered()


def test_a_tool_parser_vllm_does_not_have_is_refused_before_anything_starts():
    check_env(compose_config(["task=lookup"]).task, seed=0)  # hermes, the default: known
    with pytest.raises(ConfigError) as err:
        check_env(compose_config(["task=lookup", "task.tool_parser=no_such_parser"]).task, seed=0)
    assert err.value.keys == ["task.tool_parser"]
