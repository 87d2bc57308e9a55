"""The GPU path, as far as a machine without a GPU can take it (issue 32): the defaults that scale with the model
and the deployment, the rules that refuse what cannot fit, the servers' command lines, the trainer's export in
the server's dtype and its sharded checkpoints, and the fixes for real Hub models (a Mistral-format copy, a
template that writes today's date, prompts longer than the context)."""

import functools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from huggingface_hub.utils import filter_repo_objects
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer

from prime_rl.config import ConfigError, check_rules, compose_config
from prime_rl.config.layout import (
    GIB,
    gpu_fit_problem,
    push_bytes,
    server_push_problem,
    trainer_fit_problem,
    trainer_threads,
)
from prime_rl.config.timeouts import (
    collective_timeout_s,
    student_request_timeout_s,
    teacher_request_timeout_s,
    with_ready_timeout,
)
from prime_rl.config.user_error import UserError
from prime_rl.launcher.job import server_model_dirs
from prime_rl.launcher.plan import build_plan
from prime_rl.launcher.preflight import check_at_job, check_with_student_tokenizer
from prime_rl.launcher.resume import prepare_resume
from prime_rl.launcher.weights_dir import link_weights, unlink_weights, weights_home
from prime_rl.models.chat import PINNED_DATE, prompt_ids, student_tokenizer
from prime_rl.models.hub import MISTRAL_FORMAT, MODEL_FILES
from prime_rl.models.tiny import build_tiny_model
from prime_rl.models.tokenizer import build_tokenizer
from prime_rl.prepare import prepare_student
from prime_rl.protocol.batch import Sample
from prime_rl.protocol.run_dir import RunDir
from prime_rl.trainer.checkpoint import load_checkpoint, save_checkpoint
from prime_rl.trainer.setup import make_optimizer
from prime_rl.trainer.step import micro_batch_size
from prime_rl.trainer.weights import export_weights
from tests.conftest import ROOT, launch_cmd
from tests.test_config import TWO_LOCAL_TEACHERS

GPU_OPD = ["deployment=gpu", "training_mode=opd", "teacher=local_vllm", "deployment.num_teacher_gpus=1"]


def arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_request_timeouts_grow_with_the_longest_answer_unless_set():
    cfg = compose_config(["orchestrator.sampling.max_tokens=4096"])
    assert student_request_timeout_s(cfg) == pytest.approx(120 + 409.6)  # 4 k tokens at 10 tokens/s
    assert student_request_timeout_s(compose_config(["orchestrator.request_timeout_s=30"])) == 30
    sft = compose_config(["training_mode=sft", "teacher=local_vllm", "teacher.max_tokens=8192"])
    assert teacher_request_timeout_s(sft) == pytest.approx(120 + 819.2)  # the teacher's own length cap
    # the ranks wait while rank 0 writes an 8 B model's float32 export at 100 MB/s
    assert collective_timeout_s(compose_config(), 8_000_000_000, 4) == pytest.approx(1800 + 320)


def test_the_ready_timeout_counts_the_weights_the_servers_read(tmp_path):
    for name, size in [("student", 8 * 10**9), ("teacher", 32 * 10**9)]:
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "model.safetensors", "wb") as f:
            f.truncate(size)  # sparse: only its size counts
    cfg = compose_config([*GPU_OPD, f"model.name={tmp_path / 'student'}", f"teacher.model={tmp_path / 'teacher'}"])
    assert server_model_dirs(cfg) == [tmp_path / "student", tmp_path / "teacher"]
    assert with_ready_timeout(cfg, server_model_dirs(cfg)).launcher.ready_timeout_s == 300 + 400  # 40 GB, 100 MB/s
    tiny = compose_config(["model.cache_dir=" + str(tmp_path / "empty")])
    assert with_ready_timeout(tiny, server_model_dirs(tiny)).launcher.ready_timeout_s == 300  # not built yet
    pinned = compose_config([f"model.name={tmp_path / 'student'}", "launcher.ready_timeout_s=90"])
    assert with_ready_timeout(pinned, server_model_dirs(pinned)).launcher.ready_timeout_s == 90


def test_gpu_servers_use_cuda_graphs_and_the_teacher_bounds_its_prompt_logits(tmp_path):
    teacher = tmp_path / "teacher"
    AutoConfig.for_model("qwen2", vocab_size=65536).save_pretrained(teacher)
    cfg = compose_config(
        [*GPU_OPD, f"teacher.model={teacher}", "inference.extra_args=[--a]", "teacher.extra_args=[--b]"]
    )
    plan = build_plan(cfg, tmp_path / "run", ["0", "1", "2"])
    student, teacher_server = plan.role("inference").command, plan.role("teacher_inference").command
    assert "--enforce-eager" not in student and "--enforce-eager" not in teacher_server
    # 2 GiB of float32 logits and log-softmax at a 65 k vocabulary: 4096 tokens a forward
    assert arg(teacher_server, "--max-num-batched-tokens") == "4096" and "--max-num-batched-tokens" not in student
    assert student[-1] == "--a" and teacher_server[-1] == "--b"  # each server its own extra arguments
    for command in (student, teacher_server):  # the Hugging Face files, as the trainer reads them
        assert arg(command, "--load-format") == "safetensors" and arg(command, "--config-format") == "hf"
        assert arg(command, "--tokenizer-mode") == "hf"
    cpu = build_plan(compose_config(), tmp_path / "cpu", []).role("inference").command
    assert "--enforce-eager" in cpu
    pinned = compose_config([*GPU_OPD, f"teacher.model={teacher}", "teacher.max_num_batched_tokens=1024"])
    assert batched_tokens(pinned, tmp_path / "pinned") == "1024"


def test_nccl_weight_transfer_is_opt_in_and_refused_where_it_cannot_run(tmp_path):
    """inference.weight_transfer=nccl: the student server (not the teacher) gets vLLM's NCCL engine, and the trainer
    the run's key to drive its routes; files stay the default. Where NCCL cannot move the weights, one line."""
    files = build_plan(compose_config(GPU_OPD), tmp_path / "files", ["0", "1", "2"])
    assert "--weight-transfer-config" not in files.role("inference").command and not files.role("trainer").server_key
    nccl = build_plan(compose_config([*GPU_OPD, "inference.weight_transfer=nccl"]), tmp_path / "nccl", ["0", "1", "2"])
    assert json.loads(arg(nccl.role("inference").command, "--weight-transfer-config")) == {"backend": "nccl"}
    assert "--weight-transfer-config" not in nccl.role("teacher_inference").command
    assert nccl.role("trainer").server_key and nccl.role("orchestrator").server_key
    check_rules(compose_config(["inference.weight_transfer=gloo", "deployment=colocated"]), 0)  # CPU, in turns
    refused = [  # each refusal names the transport and what rules it out
        (["inference.weight_transfer=nccl"], ["deployment.num_infer_gpus", "deployment.num_train_gpus"]),
        (["deployment=colocated_gpu", "inference.weight_transfer=nccl"], ["deployment.layout"]),
        (["deployment=gpu", "lora=on", "inference.weight_transfer=nccl"], ["lora"]),
        (["deployment=gpu", "inference.weight_transfer=gloo"], ["deployment.num_infer_gpus"]),
        (
            ["deployment=gpu", "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"]
            + ["inference.weight_transfer=nccl"],
            ["deployment.num_infer_nodes"],
        ),
    ]
    for overrides, keys in refused:
        with pytest.raises(ConfigError) as err:
            check_rules(compose_config(overrides), 8)
        assert err.value.keys == ["inference.weight_transfer", *keys], overrides


def test_a_one_node_gpu_job_exports_weights_to_the_nodes_scratch(tmp_path):
    """Auto: SLURM's (or the job's) node-local scratch on a one-node GPU job, the run dir otherwise; the run dir's
    weights/ then links there, so every process reads the usual path, and the run's dir goes with the run."""
    gpu = compose_config(["deployment=gpu"])
    scratch = {"SLURM_TMPDIR": "/local/job", "TMPDIR": "/tmp/job"}
    assert weights_home(gpu, scratch) == Path("/local/job/prime_rl_weights")
    assert weights_home(gpu, {"TMPDIR": "/tmp/job"}) == Path("/tmp/job/prime_rl_weights")
    assert weights_home(gpu, {}) is None
    assert weights_home(compose_config(), scratch) is None  # CPU: the run dir
    nodes = compose_config(["deployment=gpu", "deployment.num_infer_nodes=1", "deployment.num_train_nodes=1"])
    assert weights_home(nodes, scratch) is None  # the other nodes cannot see this one's disk
    assert weights_home(compose_config([f"launcher.weights_dir={tmp_path}"]), {}) == tmp_path

    run_dir = RunDir(tmp_path / "run")
    (run_dir.root / "weights").mkdir(parents=True)  # a resumed run's, trimmed
    target = link_weights(run_dir, tmp_path / "scratch")
    assert (run_dir.root / "weights").resolve() == target.resolve() and target.parent.parent == tmp_path / "scratch"
    export_weights(*tied_model(), run_dir, 1)
    assert run_dir.weights_ready(1) and (target / "step_1" / "model.safetensors").is_file()
    assert link_weights(run_dir, tmp_path / "scratch") == target  # a requeued attempt links the same dir
    unlink_weights(run_dir, target)
    assert not target.parent.exists() and not (run_dir.root / "weights").exists()


def test_the_teachers_batched_tokens_stay_between_vllms_defaults(tmp_path):
    for vocab, tokens in [(151936, "2048"), (32000, "8192")]:  # 2 GiB fits 1766 and 8388 tokens
        AutoConfig.for_model("qwen2", vocab_size=vocab).save_pretrained(tmp_path / str(vocab))
        cfg = compose_config([*GPU_OPD, f"teacher.model={tmp_path / str(vocab)}"])
        assert batched_tokens(cfg, tmp_path / "run") == tokens


def batched_tokens(cfg, run_dir: Path) -> str:
    return arg(build_plan(cfg, run_dir, ["0", "1", "2"]).role("teacher_inference").command, "--max-num-batched-tokens")


def test_the_trainers_frozen_reference_copy_is_counted_where_it_keeps_one():
    """A KL to the starting weights computed in the trainer keeps them as a second float32 model in full fine-tuning
    (trainer/reference.py); under LoRA it is the base with the adapter off, served by vLLM it is none."""
    one_gpu = ["deployment=colocated_gpu"]
    kl = ["trainer.loss.kl_ref_tau=0.05"]
    # 1.5 B parameters: 22.4 GiB of state and 0.3 of 40 GiB fit with 2.75 GiB of headroom; the copy's 5.6 GiB do not
    assert gpu_fit_problem(compose_config(one_gpu), 40 * GIB, 1_500_000_000) is None
    problem = gpu_fit_problem(compose_config([*one_gpu, *kl]), 40 * GIB, 1_500_000_000)
    assert problem and "the trainer's 27.9 GiB (1.50 B parameters, full, the reference's frozen copy)" in problem
    assert gpu_fit_problem(compose_config([*one_gpu, *kl, "lora=on"]), 40 * GIB, 1_500_000_000) is None
    served = compose_config([*one_gpu, *kl, "trainer.loss.kl_ref_from=vllm", "inference.gpu_memory_utilization=0.2"])
    assert "frozen copy" not in (gpu_fit_problem(served, 24 * GIB, 1_500_000_000) or "")
    separate = compose_config(["deployment=gpu", *kl])  # 8 B: 119 GiB of state and a 30 GiB copy on one GPU
    assert "and the reference's frozen copy, sharded over 1 GPU" in trainer_fit_problem(separate, 80 * GIB, 8 * 10**9)
    assert trainer_fit_problem(compose_config(["deployment=gpu", *kl]), 141 * GIB, 7 * 10**9) is None


def test_every_server_that_scores_prompts_is_bounded_and_counted_with_a_context_per_process(tmp_path):
    """opsd's student scores its own tokens: its server gets the logits' bound a teacher gets, and the colocated
    budget counts its logits; the headroom counts a CUDA context per process on the GPU (auto)."""
    opsd_gpu = compose_config(["deployment=gpu", "training_mode=opsd"])
    vocab_32k = tmp_path / "student"
    AutoConfig.for_model("qwen2", vocab_size=32000).save_pretrained(vocab_32k)
    student = build_plan(replace(opsd_gpu, model=replace(opsd_gpu.model, name=str(vocab_32k))), tmp_path, ["0", "1"])
    assert arg(student.role("inference").command, "--max-num-batched-tokens") == "8192"  # 2 GiB fit 8388 at 32 k
    rl = build_plan(compose_config(["deployment=gpu"]), tmp_path / "rl", ["0", "1"]).role("inference").command
    assert "--max-num-batched-tokens" not in rl  # it only samples: vLLM's own batch
    pinned = compose_config(["deployment=gpu", "training_mode=opsd", "inference.max_num_batched_tokens=4096"])
    assert (
        arg(build_plan(pinned, tmp_path / "pinned", ["0", "1"]).role("inference").command, "--max-num-batched-tokens")
        == "4096"
    )
    opsd = gpu_fit_problem(compose_config(["deployment=colocated_gpu", "training_mode=opsd"]), 16 * GIB, 8 * 10**8)
    assert opsd and "the scoring servers' 2 GiB of prompt logits" in opsd and "2.75 GiB of headroom" in opsd
    # two local teachers and the served reference: three servers' logits, five processes' contexts
    many = [
        *TWO_LOCAL_TEACHERS,
        "deployment=colocated_gpu",
        "trainer.loss.kl_ref_tau=0.05",
        "trainer.loss.kl_ref_from=vllm",
    ]
    problem = gpu_fit_problem(compose_config(many), 16 * GIB, 8 * 10**8)
    assert problem and "6 GiB of prompt logits" in problem and "5 GiB of headroom" in problem, problem
    fixed = compose_config([*many, "deployment.gpu_headroom_gib=1"])
    assert "1 GiB of headroom" in gpu_fit_problem(fixed, 16 * GIB, 8 * 10**8)


def test_a_trainer_whose_state_cannot_fit_its_gpus_is_refused():
    one = compose_config(["deployment=gpu"])
    problem = trainer_fit_problem(one, 80 * GIB, 8_000_000_000)  # 128 GB of fp32 state on one 80 GiB GPU
    assert problem and "119 GiB per GPU" in problem and "sharded over 1 GPU)" in problem
    four = compose_config(["deployment=gpu", "deployment.num_train_gpus=4"])
    assert trainer_fit_problem(four, 80 * GIB, 8_000_000_000) is None  # 30 GiB a GPU
    assert trainer_fit_problem(compose_config(["deployment=gpu", "lora=on"]), 80 * GIB, 8_000_000_000) is None
    nodes = compose_config(["deployment=gpu", "deployment.num_infer_nodes=1", "deployment.num_train_nodes=2"])
    assert "sharded over 2 GPUs" in trainer_fit_problem(nodes, 40 * GIB, 32_000_000_000)  # one GPU a node


def test_a_pushed_transfer_counts_its_buffers_on_both_sides():
    """vLLM's packed NCCL producer holds three buffers at once (one in flight, the tensors it packs and their
    torch.cat), each up to one whole tensor over its size, plus the tensor being cast: for a 7 B student's
    152 k x 3584 embedding, 4.8 GiB beside the trainer's state and beside the server's share."""
    gpus = ["deployment=gpu", "deployment.num_train_gpus=4", "inference.gpu_memory_utilization=0.95"]
    files, nccl = compose_config(gpus), compose_config([*gpus, "inference.weight_transfer=nccl"])
    embedding = 151_936 * 3584
    assert push_bytes(files, embedding) == 0
    assert push_bytes(nccl, embedding) == 3 * (256 << 20) + 4 * embedding * 2  # bf16 on the wire
    # 8 B parameters over 4 GPUs: 29.8 GiB of state each, with 2 GiB of headroom a 32 GiB GPU holds it, not the push
    assert trainer_fit_problem(files, 32 * GIB, 8_000_000_000, embedding) is None
    assert trainer_fit_problem(nccl, 32 * GIB, 8_000_000_000, embedding) is not None
    assert trainer_fit_problem(nccl, 40 * GIB, 8_000_000_000, embedding) is None
    # the server: 0.95 of 80 GiB, 2 GiB of headroom and 3.5 GiB of receive buffers do not fit; of 141 GiB they do
    assert server_push_problem(files, 80 * GIB, embedding) is None
    assert server_push_problem(nccl, 80 * GIB, embedding) is not None
    assert server_push_problem(nccl, 141 * GIB, embedding) is None


def test_gpu_trainers_share_the_nodes_cores(monkeypatch):
    monkeypatch.setattr("prime_rl.config.layout.cores", lambda: 16)  # a GPU node's allocation
    assert trainer_threads(compose_config(["deployment=gpu", "deployment.num_train_gpus=2"])) == 8
    assert trainer_threads(compose_config(["deployment=colocated_gpu"])) == 16  # in turns: every core
    assert trainer_threads(compose_config(["deployment.layout=separate"])) == 1  # beside a CPU server


def test_auto_micro_batches_keep_whole_logits_within_their_budget():
    cfg = compose_config()
    long = [Sample(list(range(1024)), list(range(1024)), [])]
    assert micro_batch_size(cfg, long, 151936, fused_head=True) == 64  # the logits never exist whole
    assert micro_batch_size(cfg, long, 151936, fused_head=False) == 3  # 4 GiB / (2048 x 152 k x 4 bytes)
    assert micro_batch_size(cfg, long[:1] * 2, 300, fused_head=False) == 64
    assert micro_batch_size(compose_config(["trainer.micro_batch_size=8"]), long, 151936, fused_head=False) == 8


def tied_model(seed: int = 0):
    tok = build_tokenizer()
    return build_tiny_model(replace(compose_config().model.tiny, tie_embeddings=True, init_seed=seed), tok), tok


def test_the_export_is_in_the_servers_dtype_and_a_tied_layer_is_written_once(tmp_path):
    model, tok = tied_model()
    run_dir = RunDir(tmp_path)
    export_weights(model, tok, run_dir, 1, dtype=torch.bfloat16)
    export_weights(model, tok, run_dir, 2)
    with (
        safe_open(run_dir.weights(1) / "model.safetensors", "pt") as bf16,
        safe_open(run_dir.weights(2) / "model.safetensors", "pt") as fp32,
    ):
        assert bf16.keys() == fp32.keys() and "lm_head.weight" not in bf16.keys()
        for name in bf16.keys():
            assert bf16.get_tensor(name).dtype == torch.bfloat16 and fp32.get_tensor(name).dtype == torch.float32
            assert torch.equal(bf16.get_tensor(name), fp32.get_tensor(name).to(torch.bfloat16))
    assert next(model.parameters()).dtype == torch.float32  # the master weights are untouched


def test_a_sharded_checkpoint_resumes_the_model_the_optimizer_and_the_schedule(tmp_path):
    cfg = compose_config(["trainer.optim.warmup_steps=3"])
    model, _ = tied_model()
    optimizer, scheduler = make_optimizer(cfg, model)
    for _ in range(2):
        model(input_ids=torch.arange(8)[None]).logits.square().mean().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    run_dir = RunDir(tmp_path)
    save_checkpoint(run_dir, 2, model, optimizer, scheduler, keep=1)
    assert run_dir.latest_checkpoint() == 2 and not list(tmp_path.glob("checkpoints/.*"))
    fresh, _ = tied_model(seed=7)
    fresh_optimizer, fresh_scheduler = make_optimizer(cfg, fresh)
    load_checkpoint(run_dir, 2, fresh, fresh_optimizer, fresh_scheduler)
    torch.testing.assert_close(fresh.state_dict(), model.state_dict(), rtol=0, atol=0)
    torch.testing.assert_close(fresh_optimizer.state_dict()["state"], optimizer.state_dict()["state"], rtol=0, atol=0)
    assert fresh_scheduler.state_dict() == scheduler.state_dict()


def test_a_checkpoint_of_the_unsharded_format_is_refused_before_anything_is_trimmed(tmp_path):
    run_dir = RunDir(tmp_path)
    run_dir.checkpoint(2).mkdir(parents=True)
    (run_dir.checkpoint(2) / "trainer.pt").write_bytes(b"")
    (run_dir.checkpoint(2) / "STABLE").touch()
    run_dir.metrics.write_text('{"step": 0}\n{"step": 3}\n')
    with pytest.raises(UserError) as e:
        prepare_resume(run_dir)
    assert e.value.keys == ["ckpt.resume"]
    assert run_dir.metrics.read_text() == '{"step": 0}\n{"step": 3}\n'


def test_a_cpu_deployment_on_a_gpu_node_with_vllms_gpu_build_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr("prime_rl.launcher.preflight.gpus.has_cuda_vllm", lambda: True)
    cfg = compose_config(["launcher.dry_run=true", "monitor=off"])
    with pytest.raises(ConfigError) as err:
        check_at_job(cfg, tmp_path, print)
    assert err.value.keys == ["deployment"] and "deployment=gpu" in err.value.fix
    check_at_job(compose_config(["deployment=gpu", "launcher.dry_run=true", "monitor=off"]), tmp_path, print)


def test_the_mistral_format_copy_is_not_downloaded():
    files = ["config.json", "model-00001-of-00002.safetensors", "consolidated.safetensors", "params.json"]
    kept = filter_repo_objects(files, allow_patterns=MODEL_FILES, ignore_patterns=MISTRAL_FORMAT)
    assert list(kept) == ["config.json", "model-00001-of-00002.safetensors"]


def test_a_template_that_writes_todays_date_gets_a_pinned_one(tmp_path):
    tok = build_tokenizer()
    tok.chat_template = (
        "{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- endif %}"
        "Today: {{ date_string }}\n{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    )
    tok.save_pretrained(tmp_path)

    def rendered(*overrides: str) -> str:
        tokenizer = student_tokenizer(compose_config([f"model.name={tmp_path}", *overrides]))
        return tokenizer.decode(prompt_ids(tokenizer, "hi"))

    assert rendered().startswith(f"Today: {PINNED_DATE}")
    assert rendered("+model.chat_template_args.date_string=01 Jan 2030").startswith("Today: 01 Jan 2030")
    plain = functools.partial(AutoTokenizer.from_pretrained(tmp_path).apply_chat_template, tokenize=False)
    assert PINNED_DATE not in plain([{"role": "user", "content": "hi"}])  # unpinned, it writes today's


@pytest.mark.integration
def test_prompts_longer_than_the_context_are_refused_with_their_count(tmp_path):
    cfg = compose_config(["model.warm_start.steps=0"])  # a random student: built in seconds
    prepare_student(cfg)
    check_with_student_tokenizer(cfg)
    short = replace(cfg, inference=replace(cfg.inference, max_model_len=12))  # the prompts are 10-15 tokens
    with pytest.raises(ConfigError) as err:
        check_with_student_tokenizer(short)
    assert err.value.keys == ["inference.max_model_len"]
    # the launcher: at job time, once the student is built, before any config is written or process started
    overrides = ["model.warm_start.steps=0", "inference.max_model_len=12", "orchestrator.sampling.max_tokens=4"]
    run = subprocess.run(
        launch_cmd(*overrides, f"hydra.run.dir={tmp_path}"), capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert run.returncode == 2, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "[inference.max_model_len]" in last and "prompts" in last
    assert not (tmp_path / "configs").exists() and not (tmp_path / "logs").exists()


def test_a_model_dir_whose_tokenizer_does_not_load_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no_such_architecture"}')
    with pytest.raises(UserError) as err:
        check_with_student_tokenizer(compose_config([f"model.name={tmp_path}"]))
    assert err.value.keys == ["model.name"] and "\n" not in str(err.value)


@pytest.mark.integration
def test_the_trainers_gpu_check_runs_its_stages_here_on_a_small_model(tmp_path):
    """bench/gpu_smoke.sh's trainer part, on this CPU: the trainer process alone from its role config on batch
    files, exporting bf16 (a GPU deployment's server dtype), checkpointing sharded and resuming; LoRA; logprobs."""
    args = ["--device", "cpu", "--small", "--steps", "4", "--lora-steps", "2", "--samples", "16"]
    args += ["--prompt", "32", "--completion", "32", "--work", str(tmp_path / "work"), "--out", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, "bench/gpu_trainer_smoke.py", *args], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    figures = json.loads((tmp_path / "gpu_trainer_smoke.json").read_text())
    assert figures["full_export_dtype"] == "torch.bfloat16" and figures["full_resumed_steps"] == "4,5"
    assert figures["full_checkpoint_gb"] > 3 * figures["full_export_gb"]  # fp32 weights and AdamW's moments
    assert figures["logprobs_fused_max_abs_diff"] < 0.05 and figures["lora_export_mb"] < 1
    # the correction's stage: the sequence mask drops the half of the samples whose sampler drifted, and no other;
    # truncation at 1 scales down tokens of the rest
    assert figures["correction_masked_sequence"] == figures["correction_masked_fraction"] == pytest.approx(0.5)
    assert 0 < figures["correction_truncated_token"] < 1
