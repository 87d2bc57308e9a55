"""The server factory (prime_rl/launcher/server_factory.py) for real: the session's own (tests/conftest.py) forks a
CPU vLLM server that serves as a launcher's would, reports how it ended, and stops when its launcher dies; what the
factory cannot give, the launcher starts itself and says why in the role's log."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from prime_rl.config.schema import Config
from prime_rl.inference.server import vllm_command
from prime_rl.launcher import server_factory
from prime_rl.launcher.allocator import preload_env
from prime_rl.launcher.plan import Role
from prime_rl.launcher.processes import group_alive, spawn
from prime_rl.launcher.server_factory import FACTORY_ENV, ForkedServer, answers, fork_server
from prime_rl.prepare import prepare_student
from prime_rl.protocol.polling import wait_until
from prime_rl.protocol.servers import SERVER_KEY_ENV
from tests.conftest import ROOT
from tests.vllm_server import _healthy_url

KEY = "factory-test-key"


@pytest.fixture(scope="module")
def factory(server_factory) -> Path:
    """The session's factory (tests/conftest.py), which serves from the session's first test on."""
    assert answers(server_factory)
    return server_factory


def student_server(log_dir: Path) -> Role:
    """The student's server of the default run, as the launcher plans it (tcmalloc preloaded where installed)."""
    command, env = vllm_command(Config(), prepare_student(Config()), "student", 0, gpus=[], lora_rank=0, student=True)
    log = log_dir / "inference.log"
    env |= preload_env(Config().launcher.tcmalloc)
    return Role(name="inference", command=command, env=env, gpus=[], log_file=log, config_file=log, port=0)


@pytest.mark.vllm
def test_a_forked_server_serves_reports_how_it_ended_and_stops_with_its_launcher(factory, tmp_path):
    role = student_server(tmp_path)
    child = spawn(role, {SERVER_KEY_ENV: KEY})  # this test is its launcher
    try:
        assert isinstance(child.popen, ForkedServer)
        process = psutil.Process(child.pgid)
        assert process.parent().pid != os.getpid() and "prime_rl.launcher.server_factory" in process.parent().cmdline()
        assert " ".join(process.cmdline()) == " ".join(role.command)  # what ps shows: its own command line
        url = wait_until(lambda: _healthy_url(child), 120, 0.5, "the forked server never served")
        reply = httpx.post(
            f"{url}/v1/completions",
            json={"model": "student", "prompt": "reverse: abc", "max_tokens": 4, "temperature": 0},
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=60,
        )
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 0
    finally:
        child.signal_group(signal.SIGKILL)
    assert wait_until(child.exit_code, 30, 0.1, "no exit code came back") == -signal.SIGKILL

    # a launcher killed outright (no handler, no reaper that could find a forked server): its server stops itself
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER.format(log_dir=str(tmp_path / "killed"))],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    pgid = int(launcher.stdout.readline())
    try:
        assert group_alive(pgid)
    finally:
        launcher.kill()
        launcher.wait()
    try:
        wait_until(lambda: not group_alive(pgid), 60, 0.2, "the server outlived its launcher")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


LAUNCHER = """
from pathlib import Path
import time
from prime_rl.launcher.processes import spawn
from tests.test_server_factory import student_server
Path("{log_dir}").mkdir()
print(spawn(student_server(Path("{log_dir}")), {{}}).pgid, flush=True)
time.sleep(600)
"""


@pytest.mark.vllm
def test_what_the_factory_cannot_give_the_launcher_starts_itself_and_says_why(factory, tmp_path, monkeypatch):
    role = student_server(tmp_path)
    env = os.environ | role.env

    def refusal(env: dict[str, str]) -> str:
        with open(role.log_file, "wb+") as log:
            assert fork_server(role.command, env, log) is None
            log.seek(0)
            return log.read().decode()

    # an environment that vLLM, torch or transformers read at import differently: the server it asks for is another
    assert "HF_HOME" in refusal(env | {"HF_HOME": str(tmp_path / "hf")})
    assert "does not answer" in refusal(env | {FACTORY_ENV: str(tmp_path / "nobody.sock")})
    assert refusal(env | {"CUDA_VISIBLE_DEVICES": "0"}) == ""  # a GPU server: no factory's business
    with monkeypatch.context() as m:  # a launcher on another node of the local cluster: its servers listen there
        m.setattr(server_factory, "network", lambda: "net:[1]")
        assert "network namespace" in refusal(env)
    # one factory per socket: a second one at the same path refuses to start, before it imports anything
    second = subprocess.run(
        [sys.executable, "-m", "prime_rl.launcher.server_factory", str(factory)], capture_output=True, text=True
    )
    assert second.returncode == 1 and str(factory) in second.stderr and answers(factory)
