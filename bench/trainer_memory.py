"""Trainer memory per micro-batch at real vocabulary sizes: peak resident memory of one forward + loss + backward
above the model, its gradients and AdamW state, for vocabularies of 32 k and 152 k and sequences of 512 and 2048
tokens, on a synthetic Qwen3 model whose embedding (tied, as in small Qwen models) has the real size.

Each point runs in a fresh process: the model and optimizer state are built and touched by one small step, the
peak-RSS counter is reset (/proc/self/clear_refs), one micro-batch runs, and VmHWM minus the RSS before it is
the micro-batch's own peak. Variants:
- before: the trainer as it was, fp32 compute and a full fp32 log_softmax for logprobs and another for entropy;
- logits bf16: token_logprobs (prime_rl/trainer/logprobs.py) on the model's logits, trainer.dtype=bfloat16
  (bf16 autocast over fp32 master weights): chunked, but the logits and their gradient exist whole;
- head bf16: head_logprobs from the final hidden states and the output weight (what the trainer does in one
  process with a plain output layer): the logits never exist whole, and the output weight's gradient accumulates
  in its .grad;
- + checkpointing: head bf16 with trainer.activation_checkpointing=true.
The target: peak ≤ 1.5 × one bf16 logits tensor (batch × seq × vocab × 2 bytes).

    .venv/bin/python bench/trainer_memory.py
    .venv/bin/python bench/trainer_memory.py --smoke       # one small point
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from common import finish, print_table

NAME = "trainer_memory"
VARIANTS = {
    "before": {"dtype": "float32", "path": "before", "checkpointing": False},
    "logits bf16": {"dtype": "bfloat16", "path": "logits", "checkpointing": False},
    "head bf16": {"dtype": "bfloat16", "path": "head", "checkpointing": False},
    "+ checkpointing": {"dtype": "bfloat16", "path": "head", "checkpointing": True},
}

POINT = r"""
import json, sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from prime_rl.trainer.logprobs import head_logprobs, token_logprobs

vocab, seq, batch, hidden, layers, dtype, path, checkpointing = json.loads(sys.argv[1])
torch.set_num_threads(2)
torch.manual_seed(0)
config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                     num_attention_heads=hidden // 64, num_key_value_heads=hidden // 128, head_dim=64,
                     tie_word_embeddings=True, max_position_embeddings=seq)
model = Qwen3ForCausalLM(config)  # fp32 master weights
if checkpointing:
    model.gradient_checkpointing_enable()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
compute = getattr(torch, dtype)

def before(logits, ids):  # the trainer's functions before: a full fp32 log_softmax each
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = lp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    ent = torch.log_softmax(logits[:, :-1].float().detach(), dim=-1)
    return picked, -(ent.exp() * ent).sum(-1)

def micro_batch(n):
    ids = torch.randint(0, vocab, (batch, n))
    with torch.autocast("cpu", dtype=compute, enabled=compute != torch.float32):
        if path == "head":
            states = model.model(input_ids=ids).last_hidden_state
        else:
            logits = model(input_ids=ids).logits
    if path == "head":
        logprobs, entropy, _ = head_logprobs(states.to(compute), model.lm_head.weight, ids)
    else:
        logprobs, entropy = token_logprobs(logits, ids)[:2] if path == "logits" else before(logits, ids)
    loss = -(logprobs * torch.randn(batch, 1)).mean()
    loss.backward()
    return float(entropy.mean())

micro_batch(8)  # gradients and AdamW state exist from here on
optimizer.step()
optimizer.zero_grad(set_to_none=False)

def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))

base = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # reset VmHWM, the peak resident set
micro_batch(seq)
print(json.dumps({"base": base, "peak": status("VmHWM") - base}))
"""


def run_point(vocab: int, seq: int, batch: int, hidden: int, layers: int, variant: dict) -> dict:
    args = [vocab, seq, batch, hidden, layers, *variant.values()]
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", POINT, json.dumps(args)], capture_output=True, text=True, cwd=repo, timeout=1800
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=512, help="model width (the embedding is vocab x hidden)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1, help="sequences per micro-batch")
    parser.add_argument("--smoke", action="store_true", help="one small point, to check the script runs")
    args = parser.parse_args()
    points = [(32_000, 128)] if args.smoke else [(v, s) for v in (32_000, 152_000) for s in (512, 2048)]
    rows, record = [], {"hidden": args.hidden, "layers": args.layers, "batch": args.batch, "points": []}
    for vocab, seq in points:
        logits_bf16 = args.batch * seq * vocab * 2
        row = [f"{vocab // 1000} k", seq, logits_bf16 / 2**20]
        for name, variant in VARIANTS.items():
            measured = run_point(vocab, seq, args.batch, args.hidden, args.layers, variant)
            row.append(f"{measured['peak'] / 2**20:.0f} ({measured['peak'] / logits_bf16:.2f}x)")
            record["points"].append({"vocab": vocab, "seq": seq, "variant": name, **measured})
        rows.append(row)
    headers = ["vocab", "seq", "bf16 logits MiB", *(f"{v} MiB (x logits)" for v in VARIANTS)]
    print_table("peak memory of one micro-batch above model + optimizer state", headers, rows)
    finish(NAME, record, args.smoke)


if __name__ == "__main__":
    main()
