"""This project, in each of its two layouts, vs TRL's GRPOTrainer: eval reward vs wall-clock, steps/min, and how
much sooner one reaches the same eval reward, on the same tiny student, task, verifier, batch shape, learning rate,
steps and completion length, on this CPU.

Ours: `python launch.py` (vLLM server + orchestrator + trainer), its metrics.jsonl rows time-stamped as they
appear, in the separate layout (deployment.layout=separate: every role at once, each on its share of the cores)
and the colocated one (deployment.layout=colocated, the default on CPU: generation, then training, in turns,
each with every core); per layout
also the medians of where a step's time goes (its train rows). TRL: bench/trl_grpo.py in bench/.venv-trl
(transformers generate, use_vllm=False) with an eval callback that computes the same eval reward on the same
eval prompts, on 2 torch threads by default: both cores, as our colocated layout has, the fair comparison.
Both clocks start when the benchmark starts the command, so start-up (imports, model load, vLLM's server start)
counts on every side. Each run runs the sides in turn (--layouts' order, then TRL).

    .venv/bin/python bench/vs_trl.py --runs 3            # full: ~15-25 min on the 2-core machine
    .venv/bin/python bench/vs_trl.py --runs 3 --layouts colocated    # one layout vs TRL: ~10-15 min
    .venv/bin/python bench/vs_trl.py --runs 1 --steps 3 --smoke
Set up TRL's venv first:
    python3 -m venv bench/.venv-trl && bench/.venv-trl/bin/pip install -r bench/requirements-trl.txt
"""

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from common import (
    REPO,
    STEP_TIMES,
    add_runs_arg,
    bench_dir,
    compose,
    finish,
    fmt,
    median,
    print_table,
    run_launcher,
    run_stamped,
    step_times,
)

NAME = "vs_trl"
TRL_PYTHON = REPO / "bench" / ".venv-trl" / "bin" / "python"
LAYOUTS = {
    "separate": "deployment.layout=separate",
    "colocated": "deployment.layout=colocated",
}  # our side's name -> override
COLORS = {"separate": "tab:blue", "colocated": "tab:green", "trl": "tab:orange"}

Curve = list[tuple[float, int, float]]  # (seconds since the command started, step, eval reward)


def require_trl() -> None:
    if not TRL_PYTHON.exists():
        raise SystemExit(
            f"{TRL_PYTHON} missing; set it up: python3 -m venv bench/.venv-trl && "
            "bench/.venv-trl/bin/pip install -r bench/requirements-trl.txt"
        )


def add_layouts_arg(parser) -> None:
    text = f"our sides, comma-separated, of {', '.join(LAYOUTS)}; each run runs them in this order, then TRL"
    parser.add_argument("--layouts", type=layouts, default=",".join(LAYOUTS), help=text)


def layouts(value: str) -> list[str]:
    names = value.split(",")
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown layout(s) {unknown}; use some of {', '.join(LAYOUTS)}")
    return names


def our_overrides(args, seed: int) -> list[str]:
    # W&B off on both sides (TRL: report_to="none"): neither pays for logging the other does not do.
    return [
        f"max_steps={args.steps}",
        f"orchestrator.eval.interval={args.eval_interval}",
        "monitor=off",
        f"seed={seed}",
    ]


def trl_spec(cfg, student: Path, args, seed: int, out: Path) -> dict:
    """GRPOConfig matched to our config: what BENCHMARKS.md lists as 'settings matched'."""
    o, opt = cfg.orchestrator, cfg.trainer.optim
    grpo = dict(
        # batch shape: batch_size completions per optimizer step = prompts x rollouts_per_example, one generation
        # round per step, one pass over it (num_iterations=1: on-policy, like our max_async_level=0..1)
        per_device_train_batch_size=o.batch_size,
        gradient_accumulation_steps=1,
        num_generations=o.rollouts_per_example,
        generation_batch_size=o.batch_size,
        num_iterations=1,
        max_steps=args.steps,
        # sampling
        max_completion_length=o.sampling.max_tokens,
        temperature=o.sampling.temperature,
        top_p=o.sampling.top_p,
        top_k=0,
        # loss: no KL penalty, GRPO group-std normalisation, token-level loss normalised by the step's tokens
        beta=0.0,
        scale_rewards="group" if o.std_normalize else "none",
        loss_type="dapo",
        # optimizer: AdamW, same lr, betas, weight decay, clip, linear warmup then constant
        learning_rate=opt.lr,
        adam_beta1=opt.beta1,
        adam_beta2=opt.beta2,
        weight_decay=opt.weight_decay,
        max_grad_norm=opt.max_grad_norm,
        warmup_steps=opt.warmup_steps,
        lr_scheduler_type="constant_with_warmup",
        # CPU, no logging services, no checkpoints (ours: monitor=off; its checkpoints are cheap and kept)
        use_cpu=True,
        bf16=getattr(args, "bf16", False),  # model_size.py: bf16 autocast where our dtype=auto chose bfloat16
        use_vllm=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=seed,
    )
    return {
        "model": str(student),
        "task": asdict(cfg.task),
        "grpo": grpo,
        "threads": args.trl_threads,
        "eval_interval": args.eval_interval,
        "eval_examples": o.eval.num_examples,
        "eval_temperature": o.eval.temperature,
        "max_tokens": o.sampling.max_tokens,
        "output_dir": str(out),
    }


def run_ours(args, seed: int, layout: str, out: Path) -> dict:
    overrides = [*our_overrides(args, seed), LAYOUTS[layout]]
    launch = run_launcher(overrides, out / f"{layout}-{seed}", timeout_s=args.timeout)
    curve = [(t, r["step"], r["eval/reward"]) for t, r in launch.eval_rows()]
    train = launch.train_rows()
    stats = side_stats(curve, [t for t, _ in train], launch.process.duration_s, launch.ok, args.target)
    # step 0 also waits for the orchestrator's start-up
    return {**stats, "step_times": step_times([r for _, r in train if r["step"] >= 1])}


def run_trl(cfg, student: Path, args, seed: int, out: Path) -> dict:
    spec = trl_spec(cfg, student, args, seed, out / f"trl-{seed}")
    env = {
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": str(args.trl_threads),
        "TOKENIZERS_PARALLELISM": "false",
    }
    print(f"  $ bench/.venv-trl/bin/python bench/trl_grpo.py <spec: seed {seed}, {args.steps} steps>", flush=True)
    process, _ = run_stamped(
        [str(TRL_PYTHON), "bench/trl_grpo.py", json.dumps(spec)],
        out / f"trl-{seed}.console.log",
        env=env,
        timeout_s=args.timeout,
    )
    events = process.json_lines()
    if process.exit_code != 0:
        tail = "\n    ".join(line for _, line in process.lines[-15:])
        print(f"  TRL run failed (exit {process.exit_code}); last lines:\n    {tail}", flush=True)
    curve = [(t, e["step"], e["reward"]) for t, e in events if e.get("event") == "eval"]
    step_times = [t for t, e in events if e.get("event") == "step"]
    stats = side_stats(curve, step_times, process.duration_s, process.exit_code == 0, args.target)
    generated = [e for _, e in events if e.get("event") == "generate"][1:]  # the first one also warms up
    seconds, tokens = sum(e["s"] for e in generated), sum(e["tokens"] for e in generated)
    stats["generate_tokens_per_s"] = tokens / seconds if seconds else None
    stats["completion_tokens"] = tokens / (len(generated) * cfg.orchestrator.batch_size) if generated else None
    return stats


def side_stats(curve: Curve, step_times: list[float], wall_s: float, ok: bool, target: float) -> dict:
    reached = next(((t, step) for t, step, r in curve if r >= target), (None, None))
    span = step_times[-1] - step_times[0] if len(step_times) > 1 else None
    return {
        "ok": ok,
        "wall_s": wall_s,
        "steps": len(step_times),
        "first_step_s": step_times[0] if step_times else None,
        "steps_per_min": 60 * (len(step_times) - 1) / span if span else None,
        "eval_first": curve[0][2] if curve else None,
        "eval_final": curve[-1][2] if curve else None,
        "target_s": reached[0],
        "target_step": reached[1],
        "curve": curve,
    }


def reward_at(curve: Curve, t: float) -> float | None:
    """The latest eval reward known `t` seconds after the command started."""
    seen = [r for when, _, r in curve if when <= t]
    return seen[-1] if seen else None


def wallclock_marks(runs: list[dict], sides: list[str], every_s: float) -> list[float]:
    longest = max((r[side]["wall_s"] for r in runs for side in sides), default=0.0)
    return [every_s * k for k in range(1, int(longest // every_s) + 2)]


def ratio(trl: float | None, ours: float | None) -> float | None:
    return trl / ours if trl is not None and ours else None


def plot(runs: list[dict], sides: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for side in sides:
        for i, run in enumerate(runs):
            t, _, r = zip(*run[side]["curve"]) if run[side]["curve"] else ((), (), ())
            ax.plot(t, r, color=COLORS[side], alpha=0.7, label=side if i == 0 else None)
    ax.set_xlabel("seconds since the command started")
    ax.set_ylabel("eval reward")
    ax.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runs_arg(parser)
    add_layouts_arg(parser)
    parser.add_argument("--steps", type=int, default=250, help="optimizer steps on every side")
    parser.add_argument("--eval-interval", type=int, default=10, help="evaluate every N steps on every side")
    parser.add_argument("--target", type=float, default=0.8, help="eval reward whose time-to-reach is compared")
    parser.add_argument("--mark-s", type=float, default=30, help="wall-clock marks of the reward-vs-time table")
    parser.add_argument(
        "--trl-threads", type=int, default=2, help="torch threads of the TRL process (2: every core, as colocated)"
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run and side")
    args = parser.parse_args()
    require_trl()

    from prime_rl.prepare import prepare_student

    cfg = compose(our_overrides(args, 0))
    student = prepare_student(cfg)  # built (or taken from the cache) before any clock starts
    out = bench_dir(NAME)
    runs = []
    for seed in range(args.runs):  # the sides alternate, so a change in machine load hits all of them
        print(f"run {seed + 1}/{args.runs}", flush=True)
        ours = {layout: run_ours(args, seed, layout, out) for layout in args.layouts}
        runs.append({"seed": seed, **ours, "trl": run_trl(cfg, student, args, seed, out)})
    report(args, cfg, runs, out)


def report(args, cfg, runs: list[dict], out: Path) -> None:
    sides = [*args.layouts, "trl"]
    keys = ["wall_s", "first_step_s", "steps_per_min", "eval_first", "eval_final", "target_s", "target_step"]
    med = {side: {k: median(r[side][k] for r in runs) for k in keys} for side in sides}
    rows = [[side] + [med[side][k] for k in keys] for side in sides]
    print_table(
        f"vs TRL: medians of {len(runs)} run(s), {args.steps} steps, target eval reward {args.target}",
        [
            "side",
            "wall s",
            "1st step s",
            "steps/min",
            "eval first",
            "eval final",
            f"s to {args.target}",
            f"step to {args.target}",
        ],
        rows,
    )
    marks = wallclock_marks(runs, sides, args.mark_s)
    at = {side: {m: median(reward_at(r[side]["curve"], m) for r in runs) for m in marks} for side in sides}
    print("eval reward vs wall-clock: the latest eval at each time since the command started, median over runs")
    print_table(
        "eval reward at", ["side"] + [f"{m:g} s" for m in marks], [[side] + list(at[side].values()) for side in at]
    )
    pair_ratios = {ours: [ratio(r["trl"]["target_s"], r[ours]["target_s"]) for r in runs] for ours in args.layouts}
    to_target = {ours: median(pair_ratios[ours]) for ours in args.layouts}
    speed = {ours: ratio(med[ours]["steps_per_min"], med["trl"]["steps_per_min"]) for ours in args.layouts}
    for ours in args.layouts:
        print(
            f"{ours}: wall-clock to reach {args.target}: TRL / ours = {fmt(to_target[ours])} (median of per-run "
            f"ratios {', '.join(map(fmt, pair_ratios[ours]))}); steps/min ours / TRL = {fmt(speed[ours])}"
        )
    times = {ours: {k: median(r[ours]["step_times"][k] for r in runs) for k in STEP_TIMES} for ours in args.layouts}
    print_table(
        f"where a step's time goes (medians, s): our train rows of steps 1..{args.steps - 1}, median over runs",
        ["side", *STEP_TIMES.values()],
        [[ours, *times[ours].values()] for ours in args.layouts],
    )
    plot(runs, sides, out / "eval_vs_wallclock.png")
    print(f"plot: {out / 'eval_vs_wallclock.png'}")
    o = cfg.orchestrator
    finish(
        NAME,
        {
            "runs": args.runs,
            "steps": args.steps,
            "target": args.target,
            "eval_interval": args.eval_interval,
            "batch": f"{o.batch_size // o.rollouts_per_example} prompts x {o.rollouts_per_example}",
            "lr": cfg.trainer.optim.lr,
            "layouts": args.layouts,
            "trl_threads": args.trl_threads,
            "trl_version": trl_version(),
            "median": med,
            "step_times": times,
            "reward_at_s": at,
            "time_to_target_ratio_trl_over_ours": to_target,
            "per_run_ratios": pair_ratios,
            "steps_per_min_ratio_ours_over_trl": speed,
            "run_dir": str(out),
            "per_run": runs,
        },
        args.smoke,
    )


def trl_version() -> str:
    """TRL's version in its own venv (not importable from ours)."""
    found = sorted((TRL_PYTHON.parents[1] / "lib").glob("python*/site-packages/trl-*.dist-info"))
    return found[0].name.removeprefix("trl-").removesuffix(".dist-info") if found else "unknown"


if __name__ == "__main__":
    main()
