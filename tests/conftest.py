import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The models the tests build (warm-started students, teachers) go to the repo's own ignored cache, never the user's
# ~/.cache/prime_rl: hermetic, kept between local runs, fresh on a fresh clone. Every launched process inherits it.
os.environ.setdefault("PRIME_RL_CACHE", str(ROOT / ".cache" / "test-models"))


def pytest_collection_modifyitems(items):
    """Tests that start real servers, SLURM jobs or fault-injected runs are slow too: `pytest -m "not slow"` is
    the fast suite (under a minute), `pytest` everything."""
    for item in items:
        if any(item.get_closest_marker(m) for m in ("vllm", "slurm", "faults")):
            item.add_marker(pytest.mark.slow)


def unused_port() -> int:
    """A localhost port nobody listens on now: where a test needs a connection to be refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_cmd(*overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "launch.py"), *overrides]


@pytest.fixture(scope="session")
def standing_servers(tmp_path_factory):
    """Student servers that outlive runs, shared by the session's runs of the same recipe (tests/standing_servers.py);
    `launch(..., *standing_servers.overrides(*the run's overrides))`."""
    from tests.standing_servers import StandingServers

    pool = StandingServers(tmp_path_factory.mktemp("standing"))
    yield pool
    pool.stop_all()


@pytest.fixture(autouse=True)
def _no_cuda_env(monkeypatch):
    """Tests decide GPU visibility themselves; the machine's own CUDA_VISIBLE_DEVICES must not leak in."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
