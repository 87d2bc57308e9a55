"""The trainer's GPU path in one run (issue 32), without vLLM, without W&B and without a network: the trainer
process alone, as the launcher starts it (`python -m prime_rl.trainer --config <run>/configs/trainer.yaml`), on
batch files written here (`rollouts/step_N.bin`), on a random-init model of Qwen3-0.6B's shape (152 k vocabulary,
tied embeddings) built from its config. Every figure is one `FIG key=value` line, all of them also in
<out>/gpu_trainer_smoke.json. Stages that finished are kept in <work> and skipped by a rerun.

    bash bench/gpu_smoke.sh trainer                                      # a GPU machine: ~4-5 min
    .venv/bin/python bench/gpu_trainer_smoke.py --device cpu --small      # here: the same stages, a small model

Stages: the model; full fine-tuning in bf16 (step time, peak memory, the bf16 export and its size, a sharded
checkpoint, then a resume that continues it); the trainer's logprobs (fused head and from logits) against a plain
transformers forward; LoRA (step time, peak memory, the adapter export); the off-policy correction (a sequence mask
and a truncation: what they dropped and truncated, and the step time).
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from prime_rl.config import compose_config  # noqa: E402
from prime_rl.protocol.batch import Batch, Sample, write_batch  # noqa: E402
from prime_rl.protocol.metrics import read_rows  # noqa: E402
from prime_rl.protocol.run_dir import RunDir  # noqa: E402

QWEN3_06B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936)  # fmt: skip
SMALL = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, vocab_size=32000)  # fmt: skip
FIGURES: dict[str, object] = {}
# dense bf16 tensor-core peaks (the vendors' datasheets, SXM parts), by a name torch reports the GPU under
BF16_PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "B200": 2250e12}


def fig(key: str, value) -> None:
    FIGURES[key] = value
    print(f"FIG {key}={value}", flush=True)


def build_model(path: Path, shape: dict) -> None:
    """A random-init Qwen3 of `shape`, tied, saved in float32 (the trainer's master weights) with the project's
    tokenizer (its ids sit below the vocabulary; the batches use ids across all of it)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from prime_rl.models.tiny import save_model
    from prime_rl.models.tokenizer import build_tokenizer

    if (path / "config.json").exists():
        return
    tok = build_tokenizer()
    config = Qwen3Config(**shape, tie_word_embeddings=True, max_position_embeddings=4096,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    save_model(Qwen3ForCausalLM(config), tok, path)


def write_batches(
    run_dir: RunDir, steps: range, samples: int, prompt: int, completion: int, vocab: int, drift: float = 0.0
) -> None:
    """rl batches of random token ids: a group of 8 per prompt with spread advantages, mu near a random
    model's uniform logprob (so the trust-region mask keeps most tokens); every other sample's mu raised by `drift`
    (a sampler that liked those samples' tokens e^drift times more than the trainer does)."""
    rng = random.Random(0)
    for step in steps:
        batch = []
        for i in range(samples):
            ids = [rng.randrange(vocab) for _ in range(prompt + completion)]
            base = -torch.log(torch.tensor(float(vocab))).item() + (i % 2) * drift
            mu = [base + rng.uniform(-0.1, 0.1) for _ in range(completion)]
            batch.append(Sample(ids[:prompt], ids[prompt:], mu, advantage=(i % 8 - 3.5) / 2.3, reward=0.5))
        write_batch(Batch(step, step, batch, {}), run_dir.rollouts(step))


def trainer_config(run_dir: Path, model: Path, device: str, max_steps: int, *overrides: str):
    """The role config a GPU deployment's launcher would write for the trainer (exports in the server's bf16)."""
    cfg = compose_config(
        [
            "deployment=gpu",
            f"model.name={model}",
            f"max_steps={max_steps}",
            "monitor=off",
            "ckpt.interval=2",
            "ckpt.keep=1",
            "orchestrator.max_async_level=1",
            f"trainer.device={device}",
            "trainer.dtype=bfloat16",
            "inference.dtype=bfloat16",
            *overrides,
        ]
    )
    cfg.run_dir = str(run_dir)
    path = RunDir(run_dir).config("trainer")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    return cfg, path


def run_trainer(config_path: Path, log: Path) -> float:
    start = time.monotonic()
    # the repo first, then what the caller set (bench/gpu_smoke.sh's packages from wheels)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with open(log, "a") as out:
        proc = subprocess.run([sys.executable, "-m", "prime_rl.trainer", "--config", str(config_path)],
                              cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    if proc.returncode:
        sys.exit(f"the trainer failed ({proc.returncode}): {log}\n" + log.read_text()[-3000:])
    return time.monotonic() - start


def step_figures(prefix: str, run_dir: RunDir) -> None:
    """Medians over the steps after the first (which compiles kernels and warms the allocator)."""
    rows = read_rows(run_dir.metrics)[1:]
    for key in ("time/step", "time/train", "time/export", "memory/peak_gib", "throughput/train_tokens_per_s"):
        values = [r[key] for r in rows if key in r]
        if values:
            fig(f"{prefix}_{key.replace('/', '_')}", round(statistics.median(values), 4))


def utilisation(prefix: str, model: Path, tokens_per_s: float | None) -> None:
    """Model FLOPs utilisation: 6 FLOPs per parameter per trained token (a forward and a backward; the attention's
    own FLOPs and the old-policy forward left out, so a lower bound) against the GPU's dense bf16 peak."""
    from prime_rl.models.size import param_count

    name = torch.cuda.get_device_name(0)
    peak = next((flops for gpu, flops in BF16_PEAK_FLOPS.items() if gpu in name), None)
    if peak is None or not tokens_per_s:
        fig(f"{prefix}_mfu", "'unknown peak'")
        return
    fig(f"{prefix}_train_tflops", round(6 * param_count(model) * tokens_per_s / 1e12, 1))
    fig(f"{prefix}_mfu", round(6 * param_count(model) * tokens_per_s / peak, 4))


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def stage(work: Path, name: str, run) -> None:
    """run() once: a rerun prints the figures a finished stage saved (<work>/<name>.json) instead."""
    saved = work / f"{name}.json"
    if saved.exists():
        for key, value in json.loads(saved.read_text()).items():
            fig(key, value)
        return
    before = set(FIGURES)
    run()
    saved.write_text(json.dumps({k: v for k, v in FIGURES.items() if k not in before}))


def full_fine_tuning(work: Path, model: Path, args) -> None:
    run = RunDir(work / "full")
    shutil.rmtree(run.root, ignore_errors=True)  # what an interrupted attempt left
    write_batches(run, range(args.steps + 2), args.samples, args.prompt, args.completion, args.vocab)
    _, config = trainer_config(run.root, model, args.device, args.steps)
    fig("full_process_s", round(run_trainer(config, work / "full.log"), 1))
    step_figures("full", run)
    if args.device == "cuda":
        utilisation("full", model, FIGURES.get("full_throughput_train_tokens_per_s"))
    export = run.weights(args.steps)
    fig("full_export_gb", round(dir_bytes(export) / 1e9, 3))
    from safetensors import safe_open

    with safe_open(next(export.glob("*.safetensors")), "pt") as f:
        fig("full_export_dtype", str(f.get_tensor(next(iter(f.keys()))).dtype))
    fig("full_checkpoint_gb", round(dir_bytes(run.checkpoint(args.steps)) / 1e9, 3))
    saved = [line for line in (work / "full.log").read_text().splitlines() if line.startswith("checkpoint of step")]
    fig("full_checkpoint_s", float(saved[-1].split()[-2]))
    # a resume continues from the sharded checkpoint: two more steps, the same loss scale
    _, config = trainer_config(run.root, model, args.device, args.steps + 2, "ckpt.resume=true")
    run_trainer(config, work / "full.log")
    steps = [r["step"] for r in read_rows(run.metrics)]
    fig("full_resumed_steps", ",".join(map(str, steps[-2:])))
    assert steps[-2:] == [args.steps, args.steps + 1], steps


def logprob_agreement(model_dir: Path, args) -> None:
    """The trainer's logprobs (bf16 autocast over float32 weights, fused head and from logits) against a plain
    transformers forward of the same weights in the same dtype, log-softmax in float32."""
    from prime_rl.trainer.data import collate
    from prime_rl.trainer.model import load_model, policy_logprobs

    cfg, _ = trainer_config(model_dir.parent / "logprobs", model_dir, args.device, 1)
    device = torch.device(args.device)
    model, _ = load_model(cfg, device)
    model.eval()
    rng = random.Random(1)
    samples = [Sample([rng.randrange(args.vocab) for _ in range(args.prompt)],
                      [rng.randrange(args.vocab) for _ in range(args.completion)], []) for _ in range(4)]  # fmt: skip
    mb = collate(samples, 0)
    ids, mask = mb.input_ids.to(device), mb.attention_mask.to(device)
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        plain = model(input_ids=ids, attention_mask=mask).logits.float().log_softmax(-1)
    reference = plain[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    mb.input_ids, mb.attention_mask = ids, mask
    for name, fused in (("fused", True), ("logits", False)):
        with torch.no_grad():
            got = policy_logprobs(model, mb, 1.0, torch.bfloat16, fused).token
        diff = (got[:, 1:] - reference).abs()
        fig(f"logprobs_{name}_max_abs_diff", round(diff.max().item(), 5))
        fig(f"logprobs_{name}_mean_abs_diff", round(diff.mean().item(), 6))


def lora(work: Path, model: Path, args) -> None:
    run = RunDir(work / "lora")
    shutil.rmtree(run.root, ignore_errors=True)
    write_batches(run, range(args.lora_steps), args.samples, args.prompt, args.completion, args.vocab)
    _, config = trainer_config(run.root, model, args.device, args.lora_steps, "lora=on")
    fig("lora_process_s", round(run_trainer(config, work / "lora.log"), 1))
    step_figures("lora", run)
    fig("lora_export_mb", round(dir_bytes(run.weights(args.lora_steps)) / 1e6, 2))


def correction(work: Path, model: Path, args) -> None:
    """The off-policy correction in the real trainer on the device: seq_mask_tis (samples whose geometric-mean
    weight leaves [0.5, 2] dropped, the rest truncated per token) on batches where every other sample's mu is e
    times the trainer's (weight ~1/e: dropped), truncated at 1 so that the kept samples' noise has tokens to scale
    down; medians over the steps of the shares it dropped and truncated, and its step time against full's."""
    run = RunDir(work / "correction")
    shutil.rmtree(run.root, ignore_errors=True)
    steps = 3
    write_batches(run, range(steps), args.samples, args.prompt, args.completion, args.vocab, drift=1.0)
    overrides = ["correction=seq_mask_tis", "trainer.loss.correction.truncate_at=1"]
    _, config = trainer_config(run.root, model, args.device, steps, *overrides)
    fig("correction_process_s", round(run_trainer(config, work / "correction.log"), 1))
    step_figures("correction", run)
    rows = read_rows(run.metrics)
    for key in ("masked_fraction", "correction/masked_sequence", "correction/truncated_token",
                "correction/token_weight_max", "correction/sequence_weight_max", "mismatch_kl"):  # fmt: skip
        fig(f"correction_{key.removeprefix('correction/')}", round(statistics.median(r[key] for r in rows), 5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda, or cpu to try the stages here")
    parser.add_argument("--small", action="store_true", help="a 2-layer model of 32 k vocabulary instead of 0.6 B")
    parser.add_argument("--work", default="/tmp/gpu_trainer_smoke", help="models, run dirs, logs; reused by a rerun")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="where gpu_trainer_smoke.json goes")
    parser.add_argument("--steps", type=int, default=6, help="full fine-tuning steps before the resume")
    parser.add_argument("--lora-steps", type=int, default=4)
    parser.add_argument("--samples", type=int, default=32, help="samples per step (groups of 8)")
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--completion", type=int, default=768)
    args = parser.parse_args()
    shape = SMALL if args.small else QWEN3_06B
    args.vocab = shape["vocab_size"]
    work = Path(args.work) / ("small" if args.small else "qwen3-0.6b")  # a stage's saved figures are per shape
    work.mkdir(parents=True, exist_ok=True)
    if args.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        fig("gpu", f"'{props.name} {props.total_memory / 2**30:.0f} GiB'")
        torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")  # cuBLAS's workspace too
        free, total = torch.cuda.mem_get_info()  # this process alone on the device: the rest is its context
        fig("cuda_context_mib", round((total - free - torch.cuda.memory_reserved()) / 2**20))
    fig("versions", f"torch={torch.__version__},cuda={torch.version.cuda}")
    start = time.monotonic()
    model = work / "model"
    build_model(model, shape)
    fig("build_s", round(time.monotonic() - start, 1))
    out = Path(args.out) / "gpu_trainer_smoke.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for name, run in [
        ("full", lambda: full_fine_tuning(work, model, args)),
        ("lora", lambda: lora(work, model, args)),
        ("logprobs", lambda: logprob_agreement(model, args)),
        ("correction", lambda: correction(work, model, args)),
    ]:
        stage(work, name, run)
        out.write_text(json.dumps(FIGURES, indent=1))  # what finished is kept if a later stage fails
    fig("total_s", round(time.monotonic() - start, 1))
    out.write_text(json.dumps(FIGURES, indent=1))


if __name__ == "__main__":
    main()
