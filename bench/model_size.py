"""Model-size curve: this project, in each of its two layouts, vs TRL's GRPOTrainer as the built-in model grows
from 0.4 M to ~48 M parameters, with completions of 48-64 tokens (the reverse task on words of that length:
`task.options`; the tiny student's tokenizer has one token per letter) and the same batch, learning rate and
steps on every side. Where does the vLLM-server architecture start to pay, and in which layout?

Sides: separate (deployment.layout=separate: every role at once, each on its share of the cores), colocated
(deployment=colocated: generation, then training, in turns, each with every core) and TRL (2 torch threads:
every core). Our trainer's threads are the layout's own (trainer.num_threads=0: every core colocated, 1 beside
the server) unless --trainer-threads sets them. Per size and side: optimizer steps per minute (between the first
and the last step), generate tokens/s (ours: the orchestrator's throughput/generate_tokens_per_s; TRL: its
model.generate call per step, timed), the eval reward before and after the steps, the seconds to a fixed eval
gain, and for the separate layout the pipeline efficiency (Σ max(generate, train) / Σ step time,
bench/pipeline.py's measure; in turns, colocated and TRL, nothing overlaps); per our layout also where a step's
time goes (medians of its train rows, as in bench/vs_trl.py). Each size's student is warm-started once (cached)
before any clock starts; the sides alternate per run. Ours computes in what `dtype=auto` (the default) picks for the
size on this CPU (bfloat16 where the CPU has native bf16 and the model is large enough, launcher/auto_dtype.py);
TRL's side gets bf16 autocast (`bf16=True`) at the same sizes, float32 at the others.

--gen-heavy is the generation-heavy point: words, so completions, of 128-240 letters (max_tokens 256). The
prompt is the word plus 7 tokens of "reverse: " and the chat template, so prompt and completion (at most
247 + 256 = 503 tokens) fit the default inference.max_model_len of 512, which is also as far as the built-in
model's positions go (max_position_embeddings=512: vLLM refuses a longer max_model_len).

    .venv/bin/python bench/model_size.py --runs 3        # full: ~55-65 min on the 2-core machine
    .venv/bin/python bench/model_size.py --runs 3 --sizes m,l --gen-heavy    # ~1.5-2.5 h, new students included
    .venv/bin/python bench/model_size.py --runs 1 --sizes xs --steps 3 --smoke
Needs TRL's venv (see bench/vs_trl.py).
"""

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from common import STEP_TIMES, add_runs_arg, bench_dir, compose, finish, median, print_table, run_launcher, step_times
from pipeline import efficiency
from vs_trl import COLORS, LAYOUTS, Curve, add_layouts_arg, require_trl, run_trl, side_stats, trl_version

NAME = "model_size"
GEN_HEAVY = (128, 240)  # --gen-heavy's word lengths: the longest whose prompt + completion fit 512 positions


@dataclass(frozen=True)
class Size:
    hidden: int
    layers: int
    heads: int  # head_dim = hidden / heads = 32-64 (vLLM's CPU attention needs >= 32)
    intermediate: int
    steps: int  # optimizer steps per run: fewer at the sizes where a step takes seconds


SIZES = {
    "xs": Size(128, 2, 4, 256, 30),  # the default tiny model
    "s": Size(256, 4, 4, 1024, 20),
    "m": Size(384, 6, 6, 1536, 12),
    "l": Size(640, 8, 10, 2560, 8),
}


def overrides(size: Size, args, seed: int) -> list[str]:
    return [
        f"model.tiny.hidden_size={size.hidden}",
        f"model.tiny.num_layers={size.layers}",
        f"model.tiny.num_heads={size.heads}",
        "model.tiny.num_kv_heads=2",
        f"model.tiny.intermediate_size={size.intermediate}",
        # a short warm start (the 48 M model's SFT step takes ~10 s): it learns the format, RL does the rest
        f"model.warm_start.steps={args.warm_start_steps}",
        "model.warm_start.batch_size=32",
        "model.warm_start.warmup_steps=5",
        f"+task.options.min_len={args.min_len}",
        f"+task.options.max_len={args.max_len}",
        f"orchestrator.sampling.max_tokens={args.max_len + 16}",
        f"orchestrator.batch_size={args.prompts * args.group}",
        f"orchestrator.rollouts_per_example={args.group}",
        f"orchestrator.eval.num_examples={args.eval_examples}",
        f"orchestrator.eval.interval={max(1, steps(size, args) // 2)}",  # eval at 0, midway and the end
        f"max_steps={steps(size, args)}",
        "monitor=off",
        f"seed={seed}",
        *([f"trainer.num_threads={args.trainer_threads}"] if args.trainer_threads else []),
    ]


def short_run(size: Size, steps: int, seed: int) -> list[str]:
    """A size's run in the shorter shape other benchmarks measure it in (cpu_runtime.py, off_policy.py): 8 prompts
    x 4, completions of 48-64 tokens, 32 eval prompts, a 30-step warm start, `steps` steps."""
    size_args = dict(warm_start_steps=30, min_len=48, max_len=64, prompts=8, group=4, eval_examples=32)
    return overrides(size, argparse.Namespace(**size_args, steps=steps, trainer_threads=0), seed)


def steps(size: Size, args) -> int:
    return args.steps or size.steps


def run_ours(size: Size, args, seed: int, layout: str, out: Path) -> dict:
    launch = run_launcher([*overrides(size, args, seed), LAYOUTS[layout]], out, timeout_s=args.timeout)
    curve = [(t, r["step"], r["eval/reward"]) for t, r in launch.eval_rows()]
    train = launch.train_rows()
    stats = side_stats(curve, [t for t, _ in train], launch.process.duration_s, launch.ok, target=math.inf)
    rows = [r for _, r in train if r["step"] >= 1]  # step 0 waits for the orchestrator's start-up
    return {
        **stats,
        **gain_stats(curve, args.gain),
        "generate_tokens_per_s": median(r.get("throughput/generate_tokens_per_s") for r in rows),
        "completion_tokens": median(r.get("seq_len/completion") for r in rows),
        # only the separate layout overlaps generation and training
        "pipeline_efficiency": efficiency(rows, skip=1).get("efficiency") if layout == "separate" else None,
        "step_times": step_times(rows),
    }


def run_trl_side(cfg, student: Path, size: Size, args, seed: int, out: Path, bf16: bool) -> dict:
    n = steps(size, args)
    trl_args = argparse.Namespace(
        steps=n,
        eval_interval=max(1, n // 2),
        target=math.inf,
        trl_threads=args.trl_threads,
        timeout=args.timeout,
        bf16=bf16,
    )
    result = run_trl(cfg, student, trl_args, seed, out)
    return {**result, **gain_stats(result["curve"], args.gain), "pipeline_efficiency": None}


def gain_stats(curve: Curve, gain: float) -> dict:
    """Seconds and step of the first eval at least `gain` above the step-0 eval."""
    if not curve:
        return {"gain_s": None, "gain_step": None}
    goal = curve[0][2] + gain
    hit = next(((t, step) for t, step, r in curve if r >= goal), (None, None))
    return {"gain_s": hit[0], "gain_step": hit[1]}


def our_dtype(cfg) -> tuple[str, str]:
    """What trainer.dtype=auto and inference.dtype=auto (the defaults) resolve to for this size on this CPU, and
    why: TRL's side gets bf16 autocast where ours computes in bfloat16, so both sides compute alike."""
    from prime_rl.launcher.auto_dtype import with_auto_dtypes

    resolved, why = with_auto_dtypes(cfg)
    return resolved.trainer.dtype, why


def parameters(student: Path) -> int:
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(student).parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    add_layouts_arg(parser)
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--steps", type=int, default=0, help="steps per run at every size (0: each size's own)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="rollouts per prompt")
    parser.add_argument("--min-len", type=int, default=48, help="shortest word: the completion's length")
    parser.add_argument("--max-len", type=int, default=64, help="longest word")
    parser.add_argument(
        "--gen-heavy",
        action="store_true",
        help=f"the generation-heavy point: --min-len {GEN_HEAVY[0]} --max-len {GEN_HEAVY[1]}",
    )
    parser.add_argument("--warm-start-steps", type=int, default=30, help="SFT steps that make each size's student")
    parser.add_argument("--eval-examples", type=int, default=32, help="eval prompts (eval at 0, midway, the end)")
    parser.add_argument("--gain", type=float, default=0.05, help="eval reward gain whose time-to-reach is compared")
    parser.add_argument(
        "--trainer-threads", type=int, default=0, help="our trainer's torch threads (0: the layout's own)"
    )
    parser.add_argument("--trl-threads", type=int, default=2, help="torch threads of the TRL process (2: every core)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run and side")
    args = parser.parse_args()
    if args.gen_heavy:
        args.min_len, args.max_len = GEN_HEAVY
    require_trl()
    from prime_rl.prepare import prepare_student

    out = bench_dir(NAME)
    results = {}
    for name in args.sizes.split(","):
        size = SIZES[name]
        cfg = compose(overrides(size, args, 0))
        student = prepare_student(cfg)  # built (or taken from the cache) before any clock starts
        dtype, why = our_dtype(cfg)
        print(f"size {name}: {why}", flush=True)
        runs = []
        for seed in range(args.runs):
            print(f"size {name}, run {seed + 1}/{args.runs}", flush=True)
            ours = {
                layout: run_ours(size, args, seed, layout, out / f"{name}-{layout}-{seed}") for layout in args.layouts
            }
            trl = run_trl_side(cfg, student, size, args, seed, out / name, bf16=dtype == "bfloat16")
            runs.append({"seed": seed, **ours, "trl": trl})
        results[name] = {
            "params": parameters(student),
            "steps": steps(size, args),
            "size": vars(size),
            "dtype": dtype,
            "runs": runs,
        }
    report(args, results, out)


KEYS = [
    "steps_per_min",
    "generate_tokens_per_s",
    "completion_tokens",
    "eval_first",
    "eval_final",
    "gain_s",
    "pipeline_efficiency",
]


def report(args, results: dict, out: Path) -> None:
    sides = [*args.layouts, "trl"]
    rows, time_rows, summary = [], [], {}
    for name, res in results.items():
        med = {side: {k: median(r[side][k] for r in res["runs"]) for k in KEYS} for side in sides}
        times = {
            ours: {k: median(r[ours]["step_times"][k] for r in res["runs"]) for k in STEP_TIMES}
            for ours in args.layouts
        }
        ratios = {
            ours: {k: ratio(med[ours][k], med["trl"][k]) for k in ("steps_per_min", "generate_tokens_per_s")}
            for ours in args.layouts
        }
        summary[name] = {
            "params": res["params"],
            "dtype": res["dtype"],
            "steps": res["steps"],
            "median": med,
            "step_times": times,
            "ratio_over_trl": ratios,
        }
        params = f"{res['params'] / 1e6:.1f} M {res['dtype']}"
        rows += [[name, params, side, *(med[side][k] for k in KEYS)] for side in sides]
        rows += [[name, "", f"{ours} / TRL", *ratios[ours].values()] for ours in args.layouts]
        time_rows += [[name, params, ours, *times[ours].values()] for ours in args.layouts]
    print_table(
        f"model-size curve: medians of {args.runs} run(s), {args.prompts} prompts x {args.group}, "
        f"completions {args.min_len}-{args.max_len} chars",
        [
            "size",
            "params",
            "side",
            "steps/min",
            "gen tok/s",
            "compl. tokens",
            "eval first",
            "eval last",
            f"s to +{args.gain}",
            "pipeline eff.",
        ],
        rows,
    )
    print_table(
        "where a step's time goes (medians, s): our train rows of steps 1.., median over runs",
        ["size", "params", "side", *STEP_TIMES.values()],
        time_rows,
    )
    plot(summary, sides, out / "model_size.png")
    print(f"plot: {out / 'model_size.png'}")
    finish(
        NAME,
        {
            "runs": args.runs,
            "batch": f"{args.prompts} prompts x {args.group}",
            "layouts": args.layouts,
            "completion_chars": [args.min_len, args.max_len],
            "gen_heavy": args.gen_heavy,
            "warm_start_steps": args.warm_start_steps,
            "trainer_threads": args.trainer_threads,
            "trl_threads": args.trl_threads,
            "trl_version": trl_version(),
            "sizes": summary,
            "run_dir": str(out),
            "per_run": results,
        },
        args.smoke,
    )


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def plot(summary: dict, sides: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    params = [s["params"] for s in summary.values()]
    for ax, key, label in ((axes[0], "steps_per_min", "steps / min"), (axes[1], "generate_tokens_per_s", "gen tok/s")):
        for side in sides:
            ax.plot(
                params,
                [s["median"][side][key] or float("nan") for s in summary.values()],
                "o-",
                color=COLORS[side],
                label=side,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("parameters")
        ax.set_ylabel(label)
        ax.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    main()
