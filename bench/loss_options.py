"""The loss options of issue 31, measured against the plain run on the default run's settings (colocated, the
reverse task, 16 prompts x 8), for the same number of steps: what each does to learning, step time and memory.

Variants: plain; entropy (trainer.loss.entropy_tau=1e-3); gspo (trainer.loss.ratio_level=sequence, GSPO's clip);
kl_ref (trainer.loss.kl_ref_tau=0.05: a frozen copy of the starting weights in the trainer); kl_ref_vllm (the same
KL, the reference served by a vLLM server of the starting weights: trainer.loss.kl_ref_from=vllm); packed
(trainer.pack_tokens=128). Per variant, medians over seeds: the eval reward at the last step (128 prompts; its
standard error beside it), steps/min, the trainer's step seconds, the trainer's peak resident memory, the vLLM
servers' (summed, sampled every 0.5 s), and what the option itself reports (kl_ref; clipped/sequence; the padding
share).

    .venv/bin/python bench/loss_options.py --runs 3               # ~20 min on the 2-core machine
    .venv/bin/python bench/loss_options.py --runs 1 --steps 4 --smoke
"""

import argparse
import threading
from pathlib import Path

import psutil
from common import (
    add_runs_arg,
    bench_dir,
    compare_variants,
    compose,
    finish,
    fixed_steps,
    median,
    print_table,
    run_launcher,
    run_outcome,
    steady_rows,
)

from prime_rl.inference.entrypoint import SERVER_MODULE

NAME = "loss_options"
VARIANTS = {
    "plain": [],
    "entropy": ["trainer.loss.entropy_tau=1e-3"],
    "gspo": ["trainer.loss.ratio_level=sequence"],
    "kl_ref": ["trainer.loss.kl_ref_tau=0.05"],
    "kl_ref_vllm": ["trainer.loss.kl_ref_tau=0.05", "trainer.loss.kl_ref_from=vllm"],
    "packed": ["trainer.pack_tokens=128"],
}


def run_variant(args, variant: str, seed: int, out: Path) -> dict:
    overrides = [*fixed_steps(args.steps, seed), *VARIANTS[variant]]
    with ServerMemory() as servers:
        launch = run_launcher(overrides, out / f"{variant}-{seed}", timeout_s=args.timeout)
    rows = steady_rows(launch)
    return {
        **run_outcome(launch),
        "train_s": median(r.get("time/train") for r in rows),
        "peak_rss_gib": rows[-1].get("memory/peak_rss_gib") if rows else None,
        "servers_rss_gib": servers.peak_gib,
        "reference_s": median(r.get("time/reference") for r in rows),
        "kl_ref": rows[-1].get("kl_ref") if rows else None,
        "clipped_sequence": median(r.get("clipped/sequence") for r in rows),
        "padding": median(r.get("throughput/padding_fraction") for r in rows),
    }


KEYS = ["eval_last", "eval_last_stderr", "steps_per_min", "train_s", "reference_s", "peak_rss_gib", "servers_rss_gib"]
KEYS += ["kl_ref", "clipped_sequence"]


class ServerMemory:
    """The peak of the vLLM servers' summed resident memory while a run goes on (one run at a time: a quiet
    machine has no other server)."""

    def __init__(self):
        self.peak_gib, self.done = 0.0, threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def __enter__(self) -> "ServerMemory":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()

    def sample(self) -> None:
        while not self.done.wait(0.5):
            total = 0
            for proc in psutil.process_iter(["cmdline", "memory_info"]):
                if SERVER_MODULE in (proc.info["cmdline"] or []):
                    total += proc.info["memory_info"].rss
            self.peak_gib = max(self.peak_gib, total / 2**30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps per run")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = parser.parse_args()
    from prime_rl.prepare import prepare_student

    prepare_student(compose(fixed_steps(args.steps, 0)))  # built before any clock starts
    out, names = bench_dir(NAME), args.variants.split(",")
    runs, summary = compare_variants(args.runs, names, lambda v, seed: run_variant(args, v, seed, out))
    print_table(
        f"loss options, the default run's settings, {args.steps} steps: medians of {args.runs} run(s)",
        ["variant", "eval last", "± stderr", "steps/min", "train s", "reference s", "trainer RSS GiB"]
        + ["servers RSS GiB", "kl_ref", "clipped/seq"],
        [[v, *(summary[v][k] for k in KEYS)] for v in names],
    )
    finish(NAME, {"runs": args.runs, "steps": args.steps, "variants": summary, "per_run": runs}, args.smoke)


if __name__ == "__main__":
    main()
