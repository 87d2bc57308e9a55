import functools
import multiprocessing.process
import os
import select
import socket
import subprocess
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The models the tests build (warm-started students, teachers) go to the repo's own ignored cache, never the user's
# ~/.cache/prime_rl: hermetic, kept between local runs, fresh on a fresh clone. Every launched process inherits it.
os.environ.setdefault("PRIME_RL_CACHE", str(ROOT / ".cache" / "test-models"))
# The suite runs in two workers (README: `-n 2`): each run's torch and vLLM processes keep OpenMP threads that spin
# between parallel regions, taking the cores the other worker's run needs (two e2e runs side by side took 225 s
# with spinning, 108 s without; one alone 76 s either way). Passive threads sleep instead.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Runs log to W&B only where a test reads what they logged (monitor.wandb.mode=offline, real files:
# tests/test_monitor.py, the requeued SLURM job, the secrets scan); elsewhere a W&B run costs a second of CPU per
# role and a service process.
os.environ.setdefault("WANDB_MODE", "disabled")


# The vLLM tests that start servers and run no training: the integration tier, beside the tests marked
# `integration` (those that start a process: a dry run, a launch refused before it starts, a supervised child).
SERVER_ONLY = {"test_inference_vllm.py", "test_weight_transfer.py", "test_lora.py", "test_server_factory.py"}
TIERS = ("unit", "integration", "e2e", "faults", "slurm")


def tier(item) -> str:
    """unit: no process; integration: real processes or servers, no training run; e2e: training runs on real vLLM;
    faults: fault-injected runs and the invalid-input catalogue; slurm: jobs on the local SLURM cluster."""
    if item.get_closest_marker("slurm"):
        return "slurm"
    if item.get_closest_marker("faults"):
        return "faults"
    if item.get_closest_marker("vllm"):
        return "integration" if item.path.name in SERVER_ONLY else "e2e"
    return "integration" if item.get_closest_marker("integration") else "unit"


# Every way a test starts a process: subprocess (and asyncio's subprocesses), a fork (multiprocessing's fork
# context), multiprocessing's and torch's other start methods, and the os module's own spawns.
PROCESS_STARTS = (
    (subprocess.Popen, "_execute_child"),
    (multiprocessing.process.BaseProcess, "start"),
    (os, "fork"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
)
# While a unit test sets up or runs, the processes it tried to start (none may start); None outside unit tests.
unit_test_starts: list[str] | None = None


def pytest_configure(config):
    from prime_rl.launcher.allocator import tcmalloc

    tcmalloc()  # looked up once per process (ldconfig runs): here, not in the first unit test that plans a run
    for owner, name in PROCESS_STARTS:
        setattr(owner, name, refused_in_unit_tests(getattr(owner, name), f"{owner.__name__}.{name}"))


def refused_in_unit_tests(start, what: str):
    @functools.wraps(start)
    def guarded(*args, **kwargs):
        if unit_test_starts is None:
            return start(*args, **kwargs)
        unit_test_starts.append(what)
        raise RuntimeError(f"a unit test started a process ({what}): mark it integration")

    return guarded


@contextmanager
def no_process_in(item):
    """The unit tier starts no process: a unit test that tries fails, even where the code under test caught the
    error that refused it."""
    global unit_test_starts
    unit_test_starts = [] if tier(item) == "unit" else None
    try:
        yield
    finally:
        tried, unit_test_starts = unit_test_starts, None
    if tried:
        pytest.fail(f"a unit test started a process ({', '.join(tried)}): mark it integration", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with no_process_in(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with no_process_in(item):
        return (yield)


@contextmanager
def processes_allowed():
    """For a session's fixture (the server factory), which serves every tier: the unit test that happens to set it
    up first does not start its processes. (A hook on fixture setup would not do: pytest asks the session's hooks
    for a session's fixture, and this file's hooks are its folder's.)"""
    global unit_test_starts
    held, unit_test_starts = unit_test_starts, None
    try:
        yield
    finally:
        unit_test_starts = held


# What a test costs, roughly, by what it starts (seconds on two cores): the groups are handed to the two workers
# longest first, so that the run does not end on one long group while the other worker idles.
COST_S = {"slurm": 30, "vllm": 40, "integration": 2}
# Fixtures that build a run once for the session's workers (shared_dir): a test of another group that uses one comes
# last in its group, by when the group that owns it has built it, instead of waiting for it at the start.
SHARED_RUNS = {"rl_run"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(items):
    """Each test gets its tier's marker (`pytest -m unit` ... `-m slurm`). Tests that start real servers, SLURM jobs
    or fault-injected runs are `slow` too: `pytest -m "not slow"` is the suite without them. With two workers
    (`-n 2 --dist loadgroup`) a file's tests run in one worker, so its module fixtures run once; the SLURM tests,
    of any file, in one worker too, one after the other on the one-node cluster (their jobs' time limits count from
    a start that another worker's job would delay). The groups come in order of their cost (COST_S), the costliest
    first (with --no-loadscope-reorder, setup.cfg, pytest-xdist keeps that order)."""
    group_of, totals = {}, Counter()
    for item in items:
        its_tier = tier(item)
        item.add_marker(its_tier)
        group_of[item.nodeid] = "slurm" if its_tier == "slurm" else item.path.name
        item.add_marker(pytest.mark.xdist_group(group_of[item.nodeid]))
        if any(item.get_closest_marker(m) for m in ("vllm", "slurm", "faults")):
            item.add_marker(pytest.mark.slow)
        totals[group_of[item.nodeid]] += cost(item, its_tier)
    # stable: a group keeps its tests' order, but for those waiting on another group's run
    items.sort(key=lambda item: (-totals[group_of[item.nodeid]], borrows_a_run(item, group_of[item.nodeid])))


def borrows_a_run(item, group: str) -> bool:
    return group != item.path.name and bool(SHARED_RUNS & set(getattr(item, "fixturenames", ())))


def cost(item, its_tier: str) -> float:
    if its_tier == "slurm":
        return COST_S["slurm"]
    if item.get_closest_marker("vllm"):
        return COST_S["vllm"]
    return COST_S.get(its_tier, 0.3)


def unused_port() -> int:
    """A localhost port nobody listens on now: where a test needs a connection to be refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_cmd(*overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "launch.py"), *overrides]


@pytest.fixture(scope="session", autouse=True)
def server_factory(request, tmp_path_factory):
    """A server factory per worker (prime_rl/launcher/server_factory.py): it imports vLLM once and forks the CPU
    servers of every run the session launches, ~10 s of CPU less per start (~50 starts). Every launch inherits its
    socket; where it cannot give a run's server (another HF_HOME, say), the launcher starts its own. Started only
    where the session runs tests that start servers, and waited for: a server started meanwhile would import vLLM
    beside it."""
    from prime_rl.launcher.server_factory import FACTORY_ENV

    starts_servers = ("vllm", "faults", "slurm")
    if not any(item.get_closest_marker(m) for item in request.session.items for m in starts_servers):
        yield None
        return
    path = tmp_path_factory.mktemp("factory") / "vllm.sock"
    with open(path.with_suffix(".log"), "w") as log, processes_allowed():  # the child keeps its own copy of the fd
        proc = subprocess.Popen(
            [sys.executable, "-m", "prime_rl.launcher.server_factory", str(path), f"--stop-with={os.getpid()}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
    ready, _, _ = select.select([proc.stdout], [], [], 300)
    if not (ready and "forks vLLM servers" in proc.stdout.readline()):  # its one line, once it serves
        proc.kill()
        raise RuntimeError(f"no server factory: {path.with_suffix('.log').read_text()[-3000:]}")
    os.environ[FACTORY_ENV] = str(path)
    yield path
    del os.environ[FACTORY_ENV]
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="session")
def standing_servers(tmp_path_factory):
    """Student servers that outlive runs, shared by the session's runs of the same recipe (tests/standing_servers.py):
    `launch(run_dir, *overrides, standing=standing_servers)` (tests/test_e2e_rl.py)."""
    from tests.standing_servers import StandingServers

    pool = StandingServers(tmp_path_factory.mktemp("standing"))
    yield pool
    pool.stop_all()


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory, worker_id) -> Path:
    """A dir every worker of this session sees (each worker's own temp dirs sit side by side in it): for what two
    groups need and one builds, under a FileLock."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


@pytest.fixture(autouse=True)
def _no_cuda_env(monkeypatch):
    """Tests decide GPU visibility themselves; the machine's own CUDA_VISIBLE_DEVICES must not leak in."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
