"""`python -m prime_rl.serve <hydra overrides...> [--run-dir DIR]`: the student's vLLM server of the run those
overrides compose (as for launch.py), started as the launcher starts it, serving until stopped (Ctrl-C, SIGTERM, or
the end of the process `--stop-with` names: the program that started it, so that its death leaves no server behind).
Runs with the same overrides and `inference.url=<its URL>` use it instead of starting one of their own
(launcher/standing_server.py); it answers only the key in `inference.api_key_env` (VLLM_API_KEY)."""

import argparse
import sys
from pathlib import Path

from prime_rl.config.user_error import UserError, run_or_exit
from prime_rl.launcher.process_end import end_of, ended
from prime_rl.launcher.server_handle import command_plan, stop_signals_as_ctrl_c, student_server
from prime_rl.launcher.standing_server import standing_key
from prime_rl.launcher.validation import launch_config
from prime_rl.protocol.run_dir import RunDir

POLL_S = 0.5  # how often the server is checked: its death ends this process


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m prime_rl.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for launch.py (key=value, group=option)")
    p.add_argument("--run-dir", type=Path, metavar="DIR", help="its configs, log and URL (default: a temporary dir)")
    p.add_argument("--stop-with", type=int, metavar="PID", help="stop when this process ends (the one that started it)")
    return p.parse_intermixed_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    stop_signals_as_ctrl_c()
    try:
        run_or_exit(lambda: serve(args))
    except KeyboardInterrupt:
        print("stopped; the student's server is stopped", file=sys.stderr, flush=True)


def serve(args: argparse.Namespace) -> None:
    cfg = launch_config(args.overrides)  # a mistake: exit 2 with one line, before anything starts
    key = standing_key(cfg)
    owner = stopping_with(args.stop_with)
    plan = command_plan(cfg, args.run_dir)
    with student_server(plan, key) as server:
        url = server_url(plan.run_dir, plan.config)
        print(f"the student's server serves at {url}; runs use it with inference.url={url}", flush=True)
        while not ended(owner, POLL_S):
            server.check()
    print(f"process {args.stop_with} ended; the student's server is stopped", file=sys.stderr, flush=True)


def stopping_with(pid: int | None) -> list[int]:
    """The end of process `pid` (process_end.end_of), which must be running."""
    try:
        return end_of(pid)
    except ProcessLookupError:
        raise UserError(f"process {pid} is not running [--stop-with]; fix: give the pid of a live process") from None


def server_url(run_dir: Path, cfg) -> str:
    """Where it serves: the address it published (a port of the kernel's choosing), else its configured port."""
    published = RunDir(run_dir).server_url("inference")
    if published.exists():
        return published.read_text().strip()
    return f"http://{cfg.inference.host}:{cfg.inference.port}/v1"


if __name__ == "__main__":
    main()
