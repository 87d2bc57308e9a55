"""What the vLLM server's start-up consists of, on this CPU: the student server started alone with the launcher's
own command (prime_rl/inference/server.py), its output lines time-stamped as they arrive, split into phases:

- imports: process start → the API server's first log line (Python imports of vLLM, torch, transformers, FastAPI);
- engine process: → the engine core's first line (vLLM starts the engine in a second process, which imports again);
- model + KV cache: → "init engine … took" (model load, memory profiling, KV cache, warm-up);
- HTTP up: → the first 200 from /health.

Variants: `default` (the launcher's command as is: the engine process forked, inheriting the imports, through the
project's vLLM platform plugin, prime_rl/inference/cpu_platform.py), `spawn` (vLLM's own CPU platform, which
spawns the engine process: the plugin off) and `factory` (the same command forked by a server factory that imported
vLLM once, prime_rl/launcher/server_factory.py: only its time to the first 200 is taken, its output goes straight
to its log). Also timed: a bare `import vllm.entrypoints.openai.api_server`, the factory's own start, and (with
--launch) the launcher's own "inference ready after X s" inside a whole run, where the trainer and the
orchestrator start alongside on the same 2 cores, without and with the factory.

    .venv/bin/python bench/startup.py --runs 3 --launch
    .venv/bin/python bench/startup.py --runs 1 --smoke
"""

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from common import add_runs_arg, bench_dir, compose, finish, median, print_table, run_launcher, run_stamped

from prime_rl.inference import cpu_platform
from prime_rl.inference.entrypoint import SERVER_MODULE
from prime_rl.launcher.allocator import preload_env
from prime_rl.launcher.processes import group_alive
from prime_rl.launcher.server_factory import FACTORY_ENV, answers, fork_server
from prime_rl.protocol.polling import wait_until

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


def student_server() -> tuple[list[str], dict[str, str], int]:
    """The default run's student server as the launcher starts it (argv, env it adds, port)."""
    from prime_rl.inference.server import vllm_command
    from prime_rl.prepare import prepare_student

    cfg = compose([])
    port = free_port()
    argv, env = vllm_command(cfg, prepare_student(cfg), "student", port, [], 0, student=True)
    return argv, env | preload_env(cfg.launcher.tcmalloc), port


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def server_alone(env: dict[str, str], log) -> dict[str, float]:
    """Seconds from the command's start to the end of each phase, and to the first 200 from /health."""
    argv, extra_env, port = student_server()
    started = time.monotonic()
    ready: list[float] = []

    def ready_now(_rows) -> bool:
        if healthy(port):
            ready.append(time.monotonic() - started)
            return True
        return False

    process, _ = run_stamped(argv, log, env={**extra_env, **env}, timeout_s=300, stop_when=ready_now)
    if not ready:
        raise RuntimeError(f"the server did not become healthy; see {log}")
    ends = {phase: process.first(pattern) for phase, pattern in PHASES.items()}
    missing = [phase for phase, end in ends.items() if end is None]
    if missing:
        raise RuntimeError(f"no line ending {missing} in {log}")
    return {**{phase: end[0] for phase, end in ends.items()}, "HTTP up": ready[0]}


def start_factory(out: Path) -> tuple[subprocess.Popen, Path, float]:
    """A server factory for this benchmark, and the seconds it took to serve (its import of vLLM)."""
    path = out / "vllm.sock"
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "prime_rl.launcher.server_factory", str(path), f"--stop-with={os.getpid()}"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_until(lambda: answers(path), 300, 0.05, "the server factory did not serve")
    return proc, path, time.monotonic() - started


def server_forked(factory: Path, log: Path) -> dict[str, float]:
    """Seconds from the launcher's request to the factory to the forked server's first 200 from /health."""
    argv, extra_env, port = student_server()
    started = time.monotonic()
    with open(log, "ab") as f:
        server = fork_server(argv, os.environ | extra_env | {FACTORY_ENV: str(factory)}, f)
    if server is None:
        raise RuntimeError(f"the factory did not fork the server; see {log}")
    try:
        wait_until(lambda: healthy(port), 300, 0.05, f"the forked server did not become healthy; see {log}")
        return {"HTTP up": time.monotonic() - started}
    finally:
        os.killpg(server.pid, 15)
        wait_until(lambda: not group_alive(server.pid), 60, 0.1, "the forked server did not stop")


def import_seconds() -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", f"import {SERVER_MODULE}"], check=True, capture_output=True)
    return time.monotonic() - start


def in_a_launch(out, run: int, env: dict[str, str] | None = None) -> tuple[float | None, float]:
    """The launcher's 'inference ready after X s', and the seconds from the command to the first step's row."""
    overrides = ["max_steps=1", "orchestrator.eval.interval=0", "ckpt.interval=0", "monitor=off"]
    launch = run_launcher(overrides, out / f"launch{run}{'f' if env else ''}", env=env)
    return launch.server_ready_s(), launch.train_rows()[0][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_runs_arg(parser)
    parser.add_argument("--launch", action="store_true", help="also time the server inside whole runs")
    args = parser.parse_args()
    out = bench_dir(NAME)
    record = {"runs": args.runs, "variants": {}, "import_s": [], "launch_s": [], "factory_launch_s": []}
    factory, path, record["factory_start_s"] = start_factory(out)
    try:
        for run in range(args.runs):
            record["import_s"].append(import_seconds())
            for name, env in VARIANTS.items():
                times = server_alone(env, out / f"{name}{run}.log")
                record["variants"].setdefault(name, []).append(times)
                print(f"  run {run} {name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()), flush=True)
            record["variants"].setdefault("factory", []).append(server_forked(path, out / f"factory{run}.log"))
            print(f"  run {run} factory: HTTP up {record['variants']['factory'][-1]['HTTP up']:.1f} s", flush=True)
            if args.launch:
                record["launch_s"].append(in_a_launch(out, run))
                record["factory_launch_s"].append(in_a_launch(out, run, {FACTORY_ENV: str(path)}))
    finally:
        factory.terminate()
    rows = []
    for name, runs in record["variants"].items():
        if name == "factory":
            rows.append([name, *["-"] * len(PHASES), "-", median([r["HTTP up"] for r in runs])])
            continue
        ends = [median([r[phase] for r in runs]) for phase in [*PHASES, "HTTP up"]]
        rows.append([name, *(b - a for a, b in zip([0.0, *ends], ends)), ends[-1]])
    headers = ["variant", *(f"{p} s" for p in PHASES), "HTTP up s", "ready s"]
    print_table(f"vLLM server start-up, median of {args.runs}", headers, rows)
    print(f"bare import of the API server module: {median(record['import_s']):.1f} s")
    print(f"the server factory's own start (its import, once): {record['factory_start_s']:.1f} s")
    if args.launch:
        for label, key in (("", "launch_s"), (" with the server factory", "factory_launch_s")):
            ready, first_step = (median([r[i] for r in record[key]]) for i in (0, 1))
            print(f"inside a whole run{label}: 'inference ready after' {ready:.1f} s, first step {first_step:.1f} s")
    finish(NAME, record, args.smoke)


if __name__ == "__main__":
    main()
