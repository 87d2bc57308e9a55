"""The colocated layout (deployment=colocated, colocated_gpu): one device shared in turns. The plans of one GPU
(rl, opd with a local teacher, LoRA) as plans, since no machine here runs vLLM on a GPU; the turn lock and the
hand-off pipes between real processes. The layout end to end on this CPU: the on-policy control run of
tests/test_e2e_rl.py (and every other e2e test, where it is the default)."""

import asyncio
import json
import multiprocessing
import os
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig

from prime_rl.config import ConfigError, compose_config
from prime_rl.config.layout import GIB, gpu_fit_problem, trainer_threads, turns
from prime_rl.config.teachers import DEFAULT, teacher_view
from prime_rl.launcher.plan import build_plan
from prime_rl.launcher.preflight import check_at_launch
from prime_rl.models.size import param_count
from prime_rl.orchestrator.device import OrchestratorTurn
from prime_rl.prepare import prepare_student
from prime_rl.protocol.device_turn import DeviceTurn
from prime_rl.protocol.handoff import Listener, announce
from prime_rl.protocol.polling import wait_until
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.train import export_merged_in_turn
from tests.conftest import ROOT, launch_cmd

ONE_GPU = ["deployment=colocated_gpu"]


def one_gpu_plan(tmp_path, *overrides):
    cfg = compose_config([*ONE_GPU, *overrides])
    check_at_launch(cfg, 1)
    return build_plan(cfg, tmp_path, ["0"])


def arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_one_gpu_rl_plan_puts_every_role_on_the_gpu_with_sleep_mode_and_a_share(tmp_path):
    plan = one_gpu_plan(tmp_path)
    assert {r.name: r.gpus for r in plan.roles} == {"inference": ["0"], "orchestrator": [], "trainer": ["0"]}
    server = plan.role("inference").command
    assert "--enable-sleep-mode" in server and arg(server, "--gpu-memory-utilization") == "0.3"
    assert "--sleep-mode-offload-cudagraph" in server  # CUDA graphs (not eager on a GPU): their memory sleeps too
    eager = one_gpu_plan(tmp_path / "eager", "inference.enforce_eager=true").role("inference").command
    assert "--enable-sleep-mode" in eager and "--sleep-mode-offload-cudagraph" not in eager  # no graphs to offload
    assert plan.one_by_one  # the server profiles the GPU's free memory before the trainer loads
    orchestrator, trainer = turns(plan.config)
    assert orchestrator.work[:3] == (
        "wake the student server's weights",
        "reload the newest weights",
        "wake the student server's KV cache",
    )
    assert "the student server sleep" in orchestrator.work
    assert trainer.work[-1] == "free cached GPU memory"


def test_one_gpu_opd_plan_shares_the_gpu_with_the_local_teacher(tmp_path):
    plan = one_gpu_plan(tmp_path, "training_mode=opd", "teacher=local_vllm")
    teacher = plan.role("teacher_inference")
    assert teacher.gpus == ["0"] and "--enable-sleep-mode" in teacher.command
    assert arg(teacher.command, "--gpu-memory-utilization") == "0.2"  # teacher.gpu_memory_utilization, its own
    assert [r.name for r in plan.roles][:2] == ["inference", "teacher_inference"]  # started in this order
    assert "teacher scores the rollouts" in turns(plan.config)[0].work


def test_one_gpu_lora_plan_serves_the_adapter(tmp_path):
    plan = one_gpu_plan(tmp_path, "lora=on")
    assert "--enable-lora" in plan.role("inference").command and plan.role("trainer").gpus == ["0"]


@pytest.mark.integration
def test_the_dry_run_shows_who_holds_the_device_when(tmp_path):
    out = subprocess.run(
        launch_cmd(*ONE_GPU, "training_mode=opd", "launcher.dry_run=true", f"hydra.run.dir={tmp_path}"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "3", "COLUMNS": "400"},
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads((tmp_path / "configs" / "plan.json").read_text())
    assert plan["layout"] == "colocated" and {tuple(r["gpus"]) for r in plan["roles"]} == {("3",), ()}
    orchestrator, trainer = plan["turns"]
    assert (
        orchestrator["holder"] == "orchestrator"
        and orchestrator["work"][0] == "wake the student server's weights and the teacher servers"
    )
    assert trainer["holder"] == "trainer" and trainer["work"][0] == "train one step"
    assert plan["gpu_shares"] == {"inference.gpu_memory_utilization": 0.3, "teacher.gpu_memory_utilization": 0.2}


def test_colocated_rules_name_the_keys():
    for overrides, key in [
        (["deployment=colocated", "deployment.num_infer_gpus=2", "deployment.num_train_gpus=2"], "deployment.layout"),
        (
            ["deployment=colocated_gpu", "training_mode=opd", "deployment.num_teacher_gpus=1"],
            "deployment.num_teacher_gpus",
        ),
        (
            ["deployment=colocated", "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"],
            "deployment.num_infer_nodes",
        ),
        (["deployment=colocated", "trainer.num_procs=2"], "trainer.num_procs"),
    ]:
        with pytest.raises(ConfigError) as err:
            check_at_launch(compose_config(overrides), 4)
        assert key in err.value.keys and err.value.fix, overrides
    check_at_launch(compose_config(["deployment=colocated_gpu", "training_mode=opd"]), 1)  # no GPU of its own


def test_trainer_threads_take_every_core_only_in_turns():
    assert trainer_threads(compose_config(["deployment=colocated"])) == len(os.sched_getaffinity(0))
    # beside a server that generates at the same time
    assert trainer_threads(compose_config(["deployment.layout=separate"])) == 1
    assert trainer_threads(compose_config(["deployment=colocated", "trainer.num_threads=3"])) == 3


def test_gpu_fit_counts_the_shares_and_the_trainers_resident_state():
    opd = compose_config([*ONE_GPU, "training_mode=opd"])
    assert gpu_fit_problem(opd, 80 * GIB, 600_000_000) is None  # 0.5 x 80 + 9.6 GB + 2 GiB
    problem = gpu_fit_problem(opd, 80 * GIB, 8_000_000_000)  # full fine-tuning at 8 B: 128 GB of state
    assert problem and "inference 0.3 + teacher 0.2 of 80 GiB" in problem and "119.2 GiB" in problem
    lora = compose_config([*ONE_GPU, "training_mode=opd", "lora=on"])
    assert gpu_fit_problem(lora, 80 * GIB, 8_000_000_000) is None  # a frozen fp32 base: 32 GB


def small_qwen2(tied: bool) -> AutoConfig:
    """Two layers of width 64 over a vocabulary of 100, one kv head: sizes a test can count by hand."""
    return AutoConfig.for_model(
        "qwen2",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=100,
        tie_word_embeddings=tied,
    )


def test_param_count_reads_the_config_without_loading_weights(tmp_path):
    small_qwen2(tied=False).save_pretrained(tmp_path)  # a config and no weights: counted on the meta device
    # per layer: q (64x64 + bias), k and v (one kv head of 32: 64x32 + bias each), o (64x64), mlp (3 x 64x128), 2 norms
    layer = (64 * 64 + 64) + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64
    assert param_count(tmp_path) == 2 * 100 * 64 + 2 * layer + 64  # embedding, untied head, layers, final norm


@pytest.mark.parametrize("tied, shard", [(False, "1GB"), (True, "1GB"), (False, "20KB")], ids=["one", "tied", "shards"])
def test_param_count_from_the_weights_headers_is_the_models_own(tmp_path, tied, shard):
    """Where the weights are on disk the count comes from the safetensors headers (no torch in the launcher): the
    same as the model's parameters, with a tied head once and a sharded checkpoint summed over its index."""
    from transformers import AutoModelForCausalLM

    from prime_rl.models.size import largest_param, meta_sizes, safetensors_files

    model = AutoModelForCausalLM.from_config(small_qwen2(tied))
    model.save_pretrained(tmp_path, max_shard_size=shard)
    (tmp_path / "consolidated.safetensors").write_bytes((tmp_path / safetensors_files(tmp_path)[0].name).read_bytes())
    assert len(safetensors_files(tmp_path)) == (1 if shard == "1GB" else len(list(tmp_path.glob("model-*"))))
    assert param_count(tmp_path) == sum(p.numel() for p in model.parameters()) == sum(meta_sizes(tmp_path))
    assert largest_param(tmp_path) == max(p.numel() for p in model.parameters())


def _hold_turn(lock_file: str, log: str, release: str) -> None:
    """The trainer's turn: it holds the device until the test lets it go."""
    with DeviceTurn(Path(lock_file), shared=True):
        with open(log, "a") as f:
            f.write("trainer in\n")
        wait_until(Path(release).exists, 60, 0.01, "never released")
        with open(log, "a") as f:
            f.write("trainer out\n")


def waits_for_lock(path: Path) -> bool:
    """Someone waits in the kernel for the flock on `path` (/proc/locks lists each waiter with `->`)."""
    inode = f":{path.stat().st_ino} "
    return any("-> FLOCK" in line and inode in line for line in Path("/proc/locks").read_text().splitlines())


@pytest.mark.integration
def test_a_turn_waits_for_the_other_process_to_finish_its_own(tmp_path):
    lock, log, release = tmp_path / "device.lock", tmp_path / "log", tmp_path / "release"
    first = multiprocessing.get_context("fork").Process(target=_hold_turn, args=(str(lock), str(log), str(release)))
    first.start()
    wait_until(log.exists, 60, 0.01, "the trainer never took its turn")
    turn, held = DeviceTurn(lock, shared=True), []

    def take() -> None:
        with turn:
            held.append(log.read_text())

    taker = threading.Thread(target=take)
    taker.start()
    wait_until(lambda: waits_for_lock(lock), 60, 0.01, "the orchestrator's turn did not wait")
    release.touch()
    taker.join(60)
    first.join(60)
    assert held == ["trainer in\ntrainer out\n"]  # the whole of the other turn, then this one
    assert turn.take_times()["time/wait_turn"] > 0


def test_a_free_turn_takes_no_lock(tmp_path):
    with DeviceTurn(tmp_path / "device.lock", shared=False):
        with DeviceTurn(tmp_path / "device.lock", shared=False):
            pass
    assert not (tmp_path / "device.lock").exists()


def _announce_later(pipe: str, path: str) -> None:
    time.sleep(0.3)
    Path(path).write_text("batch")
    announce(Path(pipe))


@pytest.mark.integration
def test_an_announcement_wakes_the_waiter_long_before_its_fallback(tmp_path):
    """With a fallback longer than the timeout, only the announcement can end the wait before the timeout."""
    pipe, path = tmp_path / "handoff" / "batch", tmp_path / "step_0.bin"
    listener = Listener(pipe)
    assert listener.pipe.is_fifo()
    writer = multiprocessing.get_context("fork").Process(target=_announce_later, args=(str(pipe), str(path)))
    writer.start()
    listener.wait(path.exists, timeout_s=20, fallback_s=3600, error="not announced")
    writer.join()
    # an announcement nobody reads is dropped, and a stale one only makes the next wait look once more
    announce(pipe)
    with pytest.raises(TimeoutError, match="nothing"):
        listener.wait(lambda: False, timeout_s=0.2, fallback_s=3600, error="nothing")
    listener.close()
    assert not listener.pipe.exists()


def test_an_announcement_wakes_an_async_waiter(tmp_path):
    pipe, path = tmp_path / "handoff" / "weights", tmp_path / "weights"
    listener = Listener(pipe)

    async def main():
        async def make():
            await asyncio.sleep(0.3)
            path.write_text("w")
            announce(pipe)

        maker = asyncio.create_task(make())
        await listener.wait_async(path.exists, timeout_s=20, fallback_s=3600, error="not announced")
        await maker

    asyncio.run(main())
    listener.close()


def test_announcing_with_no_waiter_creates_nothing(tmp_path):
    announce(tmp_path / "handoff" / "batch")
    assert not (tmp_path / "handoff").exists()


def _wait_for(channel: str, path: str) -> None:
    Listener(Path(channel)).wait(Path(path).exists, timeout_s=20, fallback_s=3600, error="not announced")


@pytest.mark.integration
def test_one_announcement_wakes_every_waiter(tmp_path):
    """The ranks of a multi-process trainer each wait for the batch: each has its own pipe."""
    channel, path = tmp_path / "handoff" / "batch", tmp_path / "step_0.bin"
    ctx = multiprocessing.get_context("fork")
    ranks = [ctx.Process(target=_wait_for, args=(str(channel), str(path))) for _ in range(2)]
    for rank in ranks:
        rank.start()
    while len(list(channel.parent.glob("batch.*"))) < 2:
        time.sleep(0.01)
    path.write_text("batch")
    announce(channel)
    for rank in ranks:
        rank.join(30)
    assert [rank.exitcode for rank in ranks] == [0, 0]


class Recorder:
    """A server's client that notes the device calls of a turn (no GPU here to sleep or wake)."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    async def wake_up(self, model_dir, tags=None):
        self.log.append((self.name, "wake", tags))

    async def sleep(self, model_dir):
        self.log.append((self.name, "sleep"))

    async def reload_weights(self, weights_dir):
        self.log.append((self.name, "reload"))


def test_a_turn_on_one_gpu_wakes_the_students_weights_reloads_then_wakes_its_kv_cache(tmp_path):
    """vLLM's order for an update under sleep mode: the weights back, the reload, then the KV cache, so that the
    reload's per-layer buffers never come on top of the KV cache; the teacher wakes whole, and all sleep after."""
    cfg = replace(compose_config([*ONE_GPU, "training_mode=opd"]), run_dir=str(tmp_path))
    log = []
    teacher = SimpleNamespace(client=Recorder("teacher", log), cfg=teacher_view(cfg, DEFAULT), local=True)
    ctx = SimpleNamespace(cfg=cfg, run_dir=RunDir(tmp_path), student=Recorder("student", log), teachers={"": teacher})

    async def turn():
        device = OrchestratorTurn(ctx)
        async with device:
            await ctx.student.reload_weights("weights/step_1")
            await device.loaded()
            log.append(("student", "generate"))

    asyncio.run(turn())
    assert log == [
        ("student", "wake", ["weights"]),
        ("teacher", "wake", None),
        ("student", "reload"),
        ("student", "wake", None),
        ("student", "generate"),
        ("student", "sleep"),
        ("teacher", "sleep"),
    ]


def _hold_then_export(lock_file: str, merged: str, release: str, out: str) -> None:
    """The orchestrator's turn held until the test lets it go; meanwhile the trainer's final export waits."""
    with DeviceTurn(Path(lock_file), shared=True):
        Path(out).write_text("held")
        wait_until(Path(release).exists, 60, 0.01, "never released")
        Path(out).write_text("merged during the turn" if Path(merged).exists() else "nothing merged during the turn")


@pytest.mark.integration
def test_the_merged_lora_export_waits_for_the_trainers_turn(tmp_path):
    """lora=on: the merge copies weights (lora=embeddings: a vocabulary x hidden matrix), so on a shared device it
    runs in the trainer's turn, not while the servers are awake."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    student = prepare_student(compose_config(["model=tiny_qwen3"]))
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(student), LoraConfig(r=4, target_modules="all-linear"))
    t = SimpleNamespace(model=model, tokenizer=AutoTokenizer.from_pretrained(student), device=torch.device("cpu"))
    lock, run_dir, release, out = tmp_path / "device.lock", RunDir(tmp_path), tmp_path / "release", tmp_path / "out"
    holder = multiprocessing.get_context("fork").Process(
        target=_hold_then_export, args=(str(lock), str(run_dir.merged), str(release), str(out))
    )
    holder.start()
    wait_until(out.exists, 60, 0.01, "the orchestrator never took its turn")
    exporter = threading.Thread(target=export_merged_in_turn, args=(t, DeviceTurn(lock, shared=True), run_dir))
    exporter.start()
    wait_until(lambda: waits_for_lock(lock), 60, 0.01, "the export did not wait for the device")
    release.touch()
    holder.join(60)
    exporter.join(60)
    assert out.read_text() == "nothing merged during the turn"
    assert (run_dir.merged / "config.json").is_file()
