"""A process that imports vLLM's OpenAI server once and forks every CPU server that launchers ask it for.

Importing vLLM is ~10 s of CPU of a CPU server's ~14 s start (BENCHMARKS §11); a forked server skips it and serves
~4 s after the launcher asks. Start one, and every launch whose environment names it forks its CPU servers from it:

    python -m prime_rl.launcher.server_factory /tmp/vllm.sock &
    PRIME_RL_SERVER_FACTORY=/tmp/vllm.sock python launch.py ...

A forked server is the server the launcher would have started: the same command line and environment, its own
session and process group (the launcher stops it as any role), its output in the role's log, and it stops itself
when its launcher ends (a launcher killed with SIGKILL has no reaper that could find it: a forked process keeps the
factory's environment in /proc, not the run's marker). Where the factory cannot give that server (an environment
that differs where vLLM, torch or transformers read it at import, a launcher in another cgroup such as a SLURM
job's allocation or in another network namespace such as a node of the local cluster, a factory not running),
the launcher starts the server as a process of its own, and says why in the role's log. The factory ends with the
process `--stop-with` names, or on Ctrl-C/SIGTERM; its servers do not.
"""

import argparse
import gc
import importlib
import json
import os
import random
import runpy
import select
import shlex
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from prime_rl.inference.entrypoint import SERVER_MODULE
from prime_rl.launcher.process_end import end_of, ended

FACTORY_ENV = "PRIME_RL_SERVER_FACTORY"  # the factory's socket, in the environment of the launchers that use it
# Read when vLLM, torch and transformers are imported, or by the dynamic loader: a server whose environment differs
# from the factory's in one of these would not be the server it asks for.
IMPORT_TIME_PREFIXES = ("LD_", "PYTHON", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH", "OMP_")
IMPORT_TIME_PREFIXES += ("KMP_", "MKL_", "CUDA_", "VLLM_", "PRIME_RL_VLLM_")
# ... but for these: vLLM's settings that a server reads when it starts, not at import; PYTHONPATH, which a forked
# server puts on its sys.path as an interpreter would; HF_XET_HIGH_PERFORMANCE, a download's speed (lm-eval sets it
# in whatever imports it)
FREE_TO_DIFFER = {"VLLM_API_KEY", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_CPU_NUM_OF_RESERVED_CPU", "PYTHONPATH"}
FREE_TO_DIFFER |= {"HF_XET_HIGH_PERFORMANCE"}
MAX_REQUEST_BYTES = 1 << 20  # one request: a command line and an environment
ANSWER_TIMEOUT_S = 60  # a factory forks in milliseconds; one that does not answer in this is stuck
UNKNOWN_EXIT = 255  # a server whose factory ended before it: its exit code is lost with the factory


def pinned_env(env: dict[str, str]) -> dict[str, str]:
    """The part of an environment that a server must share with the factory that forks it."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in FREE_TO_DIFFER}


def cgroup() -> str:
    """This process's cgroup: a SLURM job's allocation, a container's, a systemd scope's."""
    return Path("/proc/self/cgroup").read_text()


def network() -> str:
    """This process's network namespace: a node of the local multi-node cluster (.ci/slurm) has its own."""
    return os.readlink("/proc/self/ns/net")


@dataclass(eq=False)
class ForkedServer:
    """A server the factory forked, with the two things the launcher asks of a Popen: its pid and poll(). It is
    the factory's child, not the launcher's: its exit code comes back over the request's connection."""

    pid: int
    conn: socket.socket | None
    pidfd: int = field(init=False)
    returncode: int | None = None

    def __post_init__(self):
        self.pidfd = os.pidfd_open(self.pid)  # this process, not a later one given its number

    def poll(self) -> int | None:
        if self.returncode is None and self.conn is not None and select.select([self.conn], [], [], 0)[0]:
            reply = self.conn.recv(MAX_REQUEST_BYTES)
            if reply:
                self.returncode = json.loads(reply)["exit"]
            self.conn.close()
            self.conn = None  # the factory ended before the server: only the pidfd still says when it does
        if self.returncode is None and self.conn is None and select.select([self.pidfd], [], [], 0)[0]:
            self.returncode = UNKNOWN_EXIT
        if self.returncode is not None and self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        return self.returncode


def fork_server(command: list[str], env: dict[str, str], log) -> ForkedServer | None:
    """The server of `command` forked by the factory `env` names, or None where none is named, `command` is no CPU
    vLLM server, or the factory cannot give it (the reason goes to `log`: the launcher then starts it itself)."""
    path = env.get(FACTORY_ENV)
    if not path or command[1:3] != ["-m", SERVER_MODULE] or env.get("CUDA_VISIBLE_DEVICES"):
        return None
    request = {
        "argv": command[3:],
        "env": env,
        "cwd": os.getcwd(),
        "owner": os.getpid(),
        "cgroup": cgroup(),
        "network": network(),
    }
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.settimeout(ANSWER_TIMEOUT_S)
    try:
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode()], [log.fileno()])
        reply = json.loads(conn.recv(MAX_REQUEST_BYTES) or b'{"refused": "it closed the connection"}')
    except OSError as e:
        reply = {"refused": f"it does not answer ({e.strerror or e})"}
    if "pid" in reply:
        return ForkedServer(reply["pid"], conn)
    conn.close()
    log.write(f"=== the server factory at {path} did not fork this server: {reply['refused']}\n".encode())
    log.flush()
    return None


class Factory:
    def __init__(self, listener: socket.socket, env: dict[str, str], set_by_import: dict[str, str]):
        self.listener = listener
        self.env = pinned_env(env)  # the environment vLLM was imported in
        self.set_by_import = set_by_import  # what importing vLLM wrote into it, as it would in every server
        self.cgroup = cgroup()
        self.network = network()
        self.servers: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the request's connection)

    def serve(self, owner: list[int]) -> None:
        """Fork what is asked and report each exit, until the end of its owner (process_end.end_of) comes."""
        while True:
            for fd in select.select([self.listener, *self.servers, *owner], [], [])[0]:
                if fd is self.listener:
                    self.answer(self.listener.accept()[0])
                elif fd in owner:
                    return
                else:
                    self.report_exit(fd)

    def answer(self, conn: socket.socket) -> None:
        message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST_BYTES, 1)
        if not message:  # a probe (answers()), or a launcher that went away
            conn.close()
            return
        request = json.loads(message)
        refusal = self.refusal(request) or ("" if fds else "no log came with the request")
        if refusal:
            conn.send(json.dumps({"refused": refusal}).encode())
            conn.close()
            for fd in fds:
                os.close(fd)
            return
        session_r, session_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            gc.enable()
            os.setsid()
            os.close(session_r)
            self.become_server(request, fds[0], conn, session_w)
        os.close(session_w)
        os.read(session_r, 1)  # b"" once the child has closed its end: its group and its title are there
        os.close(session_r)
        os.close(fds[0])
        conn.send(json.dumps({"pid": pid}).encode())
        self.servers[os.pidfd_open(pid)] = (pid, conn)

    def refusal(self, request: dict) -> str | None:
        if request["cgroup"] != self.cgroup:
            return "the launcher runs in another cgroup (a SLURM job's allocation, a container): its servers run there"
        if request["network"] != self.network:
            return "the launcher runs in another network namespace (another node): its servers listen there"
        asked = pinned_env(request["env"])
        # a launcher that imported vLLM itself passes on what the import set: the value every server gets
        imported = self.env | pinned_env(self.set_by_import)
        differ = sorted(
            k for k in asked.keys() | self.env.keys() if asked.get(k) not in (self.env.get(k), imported.get(k))
        )
        if differ:
            return f"the environment differs from the factory's in {', '.join(differ)}, read when vLLM is imported"
        return None

    def report_exit(self, pidfd: int) -> None:
        pid, conn = self.servers.pop(pidfd)
        os.close(pidfd)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        try:
            conn.send(json.dumps({"exit": code}).encode())
        except OSError:
            pass  # its launcher ended first
        conn.close()

    def become_server(self, request: dict, log_fd: int, conn: socket.socket, started_fd: int) -> None:
        """In the forked child: the server `request` asks for, as `python -m SERVER_MODULE` would run it. It never
        returns into the factory's frames: it ends in os._exit, with the exit code a `python -m` would give."""
        code = 1
        try:
            # only the factory keeps these: a launcher reads the end of its connection as the factory's end
            for other in (self.listener, conn, *(c for _, c in self.servers.values())):
                other.close()
            for pidfd in self.servers:
                os.close(pidfd)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.close(log_fd)
            os.chdir(request["cwd"])
            # what ps and /proc show: the server's command line, not the factory's (before the environment changes:
            # setproctitle takes the space of the original one)
            import setproctitle  # vLLM's dependency: how its engine process names itself

            setproctitle.setproctitle(shlex.join([sys.executable, "-m", SERVER_MODULE, *request["argv"]]))
            os.close(started_fd)  # the launcher may signal its process group now, and ps shows its command line
            os.environ.clear()
            os.environ.update(request["env"] | self.set_by_import)
            # sys.path as `python -m` in that dir with that PYTHONPATH starts: the dir first, then PYTHONPATH's
            sys.path[0] = request["cwd"]
            sys.path[1:1] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
            random.seed()  # a fresh interpreter's own, not the factory's copied into every server
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            print(f"=== forked by the server factory (pid {os.getppid()})", flush=True)
            stop_with(request["owner"])
            sys.argv = [SERVER_MODULE, *request["argv"]]
            # runpy's warning that the module it runs as __main__ is imported already: that is the point here
            warnings.filterwarnings("ignore", f"'{SERVER_MODULE}' found in sys.modules", RuntimeWarning)
            runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except KeyboardInterrupt:  # as Python ends on one: by SIGINT, its exit code -2
            traceback.print_exc()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def stop_with(owner: int, grace_s: float = 10.0) -> None:
    """Stop this server's process group once the launcher `owner` has ended: SIGTERM, SIGKILL after grace_s."""
    try:
        end = end_of(owner)
    except ProcessLookupError:
        os._exit(1)  # it ended before we started

    def watch() -> None:
        ended(end)
        os.killpg(0, signal.SIGTERM)
        time.sleep(grace_s)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="stop-with-launcher").start()


def preload() -> tuple[dict[str, str], dict[str, str]]:
    """Import what every server imports, in the environment the launcher gives every CPU server; no OpenMP region
    runs here (a fork after one could hang the forked engine's first, forking_cpu_platform.py). Returns that
    environment and what the import set in it (vLLM sets LD_LIBRARY_PATH, TORCHINDUCTOR_*, KMP_* when imported)."""
    from prime_rl.inference.server import CPU_SERVER_ENV

    os.environ.update(CPU_SERVER_ENV)
    before = dict(os.environ)
    importlib.import_module(SERVER_MODULE)
    from vllm.platforms import current_platform

    assert current_platform.is_cpu()  # resolved now, by our plugin (CPU_SERVER_ENV), so that no server does again
    import prime_rl.inference.server_auth  # noqa: F401
    import prime_rl.inference.weight_reload  # noqa: F401

    return before, {k: v for k, v in os.environ.items() if before.get(k) != v}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m prime_rl.launcher.server_factory", description=__doc__.split("\n")[0])
    p.add_argument("socket", type=Path, help=f"the Unix socket it listens on (the launchers' {FACTORY_ENV})")
    p.add_argument("--stop-with", type=int, metavar="PID", help="stop when this process ends")
    args = p.parse_args(argv)
    if answers(args.socket):
        sys.exit(f"a server factory already listens at {args.socket}; fix: use it, or give another path")
    reexec_with_preloads()
    owner = end_of(args.stop_with)
    # what Python's docs give a process that forks without exec: no collection leaves holes in the pages the
    # servers share, and none in a server walks the objects it inherits (which would copy their pages)
    gc.disable()
    env, set_by_import = preload()
    gc.freeze()
    args.socket.unlink(missing_ok=True)  # a factory's that ended without removing it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(args.socket))
    os.chmod(args.socket, 0o600)  # requests carry the run's server key
    ours = args.socket.stat().st_ino
    listener.listen(16)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"the server factory forks vLLM servers at {args.socket}; launchers use it with {FACTORY_ENV}={args.socket}")
    sys.stdout.flush()
    try:
        Factory(listener, env, set_by_import).serve(owner)
    except (KeyboardInterrupt, SystemExit):
        pass
    listener.close()
    if args.socket.exists() and args.socket.stat().st_ino == ours:  # not another factory's since
        args.socket.unlink()
    # nothing to finalize, and the frozen imports would make the interpreter's end report nanobind's types leaked
    os._exit(0)


def answers(path: Path) -> bool | None:
    """Whether a factory listens at `path` (None: nothing is there)."""
    if not path.exists():
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
        return probe.connect_ex(str(path)) == 0


def reexec_with_preloads() -> None:
    """tcmalloc must be loaded when the process starts, as the launcher preloads it into every CPU server: the
    factory runs again with it where the launcher would preload it (launcher.tcmalloc's default)."""
    from prime_rl.launcher.allocator import preload_env

    preload = preload_env(enabled=True)
    if preload:
        os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *sys.argv[1:]], os.environ | preload)


if __name__ == "__main__":
    main()
