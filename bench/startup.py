"""What the vLLM server's start-up consists of, on this CPU: the student server started alone with the launcher's
own command (prime_rl/inference/server.py), its output lines time-stamped as they arrive, split into phases:

- imports: process start → the API server's first log line (Python imports of vLLM, torch, transformers, FastAPI);
- engine process: → the engine core's first line (vLLM starts the engine in a second process, which imports again);
- model + KV cache: → "init engine … took" (model load, memory profiling, KV cache, warm-up);
- HTTP up: → the first 200 from /health.

Variants: `default` (the launcher's command as is: the engine process forked, inheriting the imports, through the
project's vLLM platform plugin, prime_rl/inference/cpu_platform.py) and `spawn` (vLLM's own CPU platform, which
spawns the engine process: the plugin off). Also timed: a bare
`import vllm.entrypoints.openai.api_server`, and (with --launch) the launcher's own "inference ready after X s"
inside a whole run, where the trainer and the orchestrator start alongside on the same 2 cores.

    .venv/bin/python bench/startup.py --runs 3 --launch
    .venv/bin/python bench/startup.py --runs 1 --smoke
"""

import argparse
import socket
import subprocess
import sys
import time

import httpx
from common import add_runs_arg, bench_dir, compose, finish, median, print_table, run_launcher, run_stamped

from prime_rl.inference import cpu_platform

NAME = "startup"
PHASES = {  # phase: the line that ends it
    "imports": r"^\(APIServer pid=",
    "engine process": r"^\(EngineCore pid=",
    "model + KV cache": r"init engine .* took",
}
VARIANTS = {"default": {}, "spawn": {cpu_platform.ENV_VAR: "0"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_alone(env: dict[str, str], log) -> dict[str, float]:
    """Seconds from the command's start to the end of each phase, and to the first 200 from /health."""
    from prime_rl.inference.server import vllm_command
    from prime_rl.prepare import prepare_student

    cfg = compose([])
    port = free_port()
    argv, extra_env = vllm_command(cfg, prepare_student(cfg), "student", port, [], 0, student=True)
    started = time.monotonic()
    ready: list[float] = []

    def healthy(_rows) -> bool:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                ready.append(time.monotonic() - started)
                return True
        except httpx.HTTPError:
            pass
        return False

    process, _ = run_stamped(argv, log, env={**extra_env, **env}, timeout_s=300, stop_when=healthy)
    if not ready:
        raise RuntimeError(f"the server did not become healthy; see {log}")
    ends = {phase: process.first(pattern) for phase, pattern in PHASES.items()}
    missing = [phase for phase, end in ends.items() if end is None]
    if missing:
        raise RuntimeError(f"no line ending {missing} in {log}")
    return {**{phase: end[0] for phase, end in ends.items()}, "HTTP up": ready[0]}


def import_seconds() -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "import vllm.entrypoints.openai.api_server"], check=True, capture_output=True)
    return time.monotonic() - start


def in_a_launch(out, run: int) -> float | None:
    overrides = ["max_steps=1", "orchestrator.eval.interval=0", "ckpt.interval=0", "monitor=off"]
    return run_launcher(overrides, out / f"launch{run}").server_ready_s()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runs_arg(parser)
    parser.add_argument("--launch", action="store_true", help="also time the server inside whole runs")
    args = parser.parse_args()
    out = bench_dir(NAME)
    record = {"runs": args.runs, "variants": {}, "import_s": [], "launch_ready_s": []}
    for run in range(args.runs):
        record["import_s"].append(import_seconds())
        for name, env in VARIANTS.items():
            times = server_alone(env, out / f"{name}{run}.log")
            record["variants"].setdefault(name, []).append(times)
            print(f"  run {run} {name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()), flush=True)
        if args.launch:
            record["launch_ready_s"].append(in_a_launch(out, run))
    rows = []
    for name, runs in record["variants"].items():
        ends = [median([r[phase] for r in runs]) for phase in [*PHASES, "HTTP up"]]
        rows.append([name, *(b - a for a, b in zip([0.0, *ends], ends)), ends[-1]])
    headers = ["variant", *(f"{p} s" for p in PHASES), "HTTP up s", "ready s"]
    print_table(f"vLLM server start-up, median of {args.runs}", headers, rows)
    print(f"bare import of the API server module: {median(record['import_s']):.1f} s")
    if args.launch:
        print(f"inside a whole run, the launcher's 'inference ready after': {median(record['launch_ready_s']):.1f} s")
    finish(NAME, record, args.smoke)


if __name__ == "__main__":
    main()
