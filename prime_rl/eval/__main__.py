"""`python -m prime_rl.eval [--run DIR] [--step S,…] [--task T,…] <hydra overrides...>`: the models of a run (its
starting model, a step, the latest, a LoRA run's merged model, its local teacher) or the config's model (model.name:
a model dir or a Hub id) evaluated on one or more tasks, with the training eval's sampling and metrics
(orchestrator.eval.*: k samples per prompt for avg@k and pass@k), around a vLLM server it starts and stops (or a
standing one, inference.url)."""

import argparse
from pathlib import Path

from prime_rl.devstep.server import run_stoppable


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m prime_rl.eval", description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for launch.py, on top of the run's own")
    p.add_argument("--run", type=Path, metavar="DIR", help="a run dir of launch.py: its config and its models")
    p.add_argument(
        "--step", type=names, default=[], metavar="S,…", help="with --run: start, latest (default), merged, N; a list"
    )
    p.add_argument(
        "--task", type=names, default=[], metavar="T,…", help="task group options (default: the run's own task)"
    )
    p.add_argument("--teacher", action="store_true", help="evaluate the run's (local_vllm) teacher instead")
    p.add_argument("--harness", type=names, default=[], metavar="T,…", help="lm-eval tasks too (the harness extra)")
    p.add_argument("--harness-include", type=Path, metavar="DIR", help="a dir of your own lm-eval task YAMLs")
    p.add_argument(
        "--harness-api",
        choices=["chat", "completions"],
        default="chat",
        help="chat: the server applies the chat template (tasks that generate); completions: raw text, loglikelihood",
    )
    p.add_argument(
        "--out", type=Path, metavar="DIR", help="its dir: results.json, the server's log (default: <run>/evals/<time>)"
    )
    return p.parse_intermixed_args(argv)


def names(text: str) -> list[str]:
    """A comma-separated list, as a Hydra sweep writes one: start,latest."""
    return [name.strip() for name in text.split(",") if name.strip()]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_stoppable(lambda: evaluate(args))


def evaluate(args: argparse.Namespace) -> None:
    from rich.console import Console

    from prime_rl.eval.results import show_results, write_results
    from prime_rl.eval.run import Request, evaluate_request
    from prime_rl.eval.wandb_results import log_results
    from prime_rl.monitor.wandb_mode import wandb_mode

    request = Request(
        args.run,
        args.step,
        args.task,
        args.overrides,
        args.out,
        args.teacher,
        args.harness,
        args.harness_include,
        args.harness_api,
    )
    cfg, out, rows = evaluate_request(request)
    console = Console(highlight=False)
    show_results(console, rows)
    asked = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    path = write_results(out, asked, rows)
    logged = log_results(cfg, out, asked, rows)
    if logged:
        console.print(f"W&B ({wandb_mode(cfg.monitor.wandb.mode)}): {logged}", soft_wrap=True)
    console.print(f"results: {path}", soft_wrap=True)


if __name__ == "__main__":
    main()
