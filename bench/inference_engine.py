"""Inference engine: vLLM (CPU build, a server started exactly as the launcher starts one) vs transformers
`generate`, tokens/s on the same batch: the same prompts, n samples each, max_tokens, temperature 1, top-p 1,
no top-k.

vLLM gets the batch as the orchestrator sends it: one /v1/completions request with token-id prompts and `n`.
transformers gets it as one left-padded `generate` call with num_return_sequences=n. Tokens are the completion
tokens each engine produced (up to and including the end-of-turn token; with --ignore-eos every sample runs to
max_tokens), divided by the wall time of the call. Each engine is warmed up with one batch first (vLLM's first
request of a new shape can take seconds); then the two alternate, `--batches` batches each per run.

    .venv/bin/python bench/inference_engine.py --runs 3                                     # the rl step's batch
    .venv/bin/python bench/inference_engine.py --runs 3 --prompts 32 --n 1 --max-tokens 64 --ignore-eos
    .venv/bin/python bench/inference_engine.py --runs 1 --batches 1 --smoke
"""

import argparse
import tempfile
import time
from pathlib import Path

import httpx
from common import add_runs_arg, compose, finish, median, print_table

NAME = "inference_engine"


def vllm_batch(url: str, prompts: list[list[int]], args) -> dict:
    payload = {
        "model": "student",
        "prompt": prompts,
        "n": args.n,
        "max_tokens": args.max_tokens,
        "temperature": 1.0,
        "top_p": 1.0,
        "ignore_eos": args.ignore_eos,
        "return_token_ids": True,
    }
    start = time.monotonic()
    reply = httpx.post(f"{url}/v1/completions", json=payload, timeout=600)
    seconds = time.monotonic() - start
    reply.raise_for_status()
    tokens = sum(len(c["token_ids"]) for c in reply.json()["choices"])
    return {"tokens": tokens, "seconds": seconds}


def hf_batch(model, tokenizer, prompts: list[list[int]], args) -> dict:
    import torch

    batch = tokenizer.pad({"input_ids": prompts}, padding=True, padding_side="left", return_tensors="pt")
    start = time.monotonic()
    with torch.no_grad():
        out = model.generate(
            **batch,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            num_return_sequences=args.n,
            max_new_tokens=args.max_tokens,
            min_new_tokens=args.max_tokens if args.ignore_eos else 0,
            pad_token_id=tokenizer.pad_token_id,
        )
    seconds = time.monotonic() - start
    completions = out[:, batch["input_ids"].shape[1] :].tolist()
    return {"tokens": sum(generated_length(c, tokenizer.eos_token_id) for c in completions), "seconds": seconds}


def generated_length(ids: list[int], eos: int) -> int:
    """Tokens up to and including the first end-of-turn token (what follows it is padding)."""
    return ids.index(eos) + 1 if eos in ids else len(ids)


def timed(fn, batches: int) -> dict:
    results = [fn() for _ in range(batches)]
    tokens, seconds = sum(r["tokens"] for r in results), sum(r["seconds"] for r in results)
    return {"tokens_per_s": tokens / seconds, "tokens_per_batch": tokens / batches, "s_per_batch": seconds / batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per batch (the rl step: 16)")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (the rl step: 8)")
    parser.add_argument("--max-tokens", type=int, default=16, help="completion length cap (the default: 16)")
    parser.add_argument("--ignore-eos", action="store_true", help="every sample runs to max_tokens")
    parser.add_argument("--batches", type=int, default=5, help="timed batches per engine per run")
    parser.add_argument(
        "--hf-threads",
        type=int,
        default=1,
        help="torch threads of transformers generate (1, like the project's processes)",
    )
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils.logging import disable_progress_bar

    from prime_rl.models.chat import prompt_ids
    from prime_rl.prepare import prepare_student
    from prime_rl.tasks import load_task
    from tests.vllm_server import serve  # the launcher's vLLM command and process-group handling

    cfg = compose()
    student = prepare_student(cfg)
    tokenizer = AutoTokenizer.from_pretrained(student)
    prompts = [prompt_ids(tokenizer, ex.prompt) for ex in load_task(cfg.task).train[: args.prompts]]
    torch.set_num_threads(args.hf_threads)
    disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(student, dtype=torch.float32).eval()
    runs = []
    with tempfile.TemporaryDirectory() as logs, serve(student, Path(logs)) as url:
        vllm_batch(url, prompts, args), hf_batch(model, tokenizer, prompts, args)  # warm-up, not timed
        for run in range(args.runs):
            print(f"run {run + 1}/{args.runs}", flush=True)
            runs.append(
                {
                    "vllm": timed(lambda: vllm_batch(url, prompts, args), args.batches),
                    "transformers": timed(lambda: hf_batch(model, tokenizer, prompts, args), args.batches),
                }
            )
    report(args, runs)


def report(args, runs: list[dict]) -> None:
    keys = ["tokens_per_s", "tokens_per_batch", "s_per_batch"]
    med = {engine: {k: median(r[engine][k] for r in runs) for k in keys} for engine in ("vllm", "transformers")}
    shape = (
        f"{args.prompts} prompts x {args.n}, max_tokens {args.max_tokens}{', ignore_eos' if args.ignore_eos else ''}"
    )
    print_table(
        f"inference engine: medians of {args.runs} run(s) x {args.batches} batches; {shape}",
        ["engine", "tokens/s", "tokens/batch", "s/batch"],
        [[engine] + [med[engine][k] for k in keys] for engine in med],
    )
    speedup = med["vllm"]["tokens_per_s"] / med["transformers"]["tokens_per_s"]
    print(f"vLLM / transformers tokens/s = {speedup:.2f}")
    finish(
        NAME,
        {
            "runs": args.runs,
            "batches": args.batches,
            "shape": shape,
            "hf_threads": args.hf_threads,
            "median": med,
            "vllm_over_transformers": speedup,
            "per_run": runs,
        },
        args.smoke,
    )


if __name__ == "__main__":
    main()
