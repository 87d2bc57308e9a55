"""What the launcher, the orchestrator and the vLLM servers agree on to reach each other."""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from prime_rl.protocol.atomic import write_text

STUDENT_ROLE = "inference"  # the launcher's role of the student's server: its log, its run-dir files
STUDENT_MODEL_NAME = "student"  # served name of the student's base weights
TEACHER_MODEL_NAME = "teacher"  # served name of the local teacher
# The env var through which the launcher hands its children the run's server key: vLLM requires it on /v1/*,
# the orchestrator sends it. Never a config value, so it cannot reach a config dump.
SERVER_KEY_ENV = "VLLM_API_KEY"
# The worker-extension method (inference/weight_reload.py) the orchestrator calls through /collective_rpc to load
# a policy update in place; not vLLM's own `reload_weights`, which leaves a tied output layer on its old weights.
RELOAD_METHOD = "reload_policy"
# The worker-extension method the trainer calls after a pushed transfer (inference.weight_transfer=nccl|gloo): the
# same refresh of tied output layers that RELOAD_METHOD does after loading files.
REFRESH_METHOD = "refresh_shared_output_layers"


def answers_health(http: httpx.Client, root: str) -> bool:
    """Whether the server's engine is up (/health needs no key)."""
    try:
        return http.get(root + "/health").status_code == 200
    except httpx.HTTPError:
        return False


def serves(http: httpx.Client, root: str) -> bool:
    """/health answers once the engine is up; /v1/models (which needs the server key) once the model is served,
    and only by a server of this run."""
    try:
        return all(http.get(root + path).status_code == 200 for path in ("/health", "/v1/models"))
    except httpx.HTTPError:
        return False


@dataclass(frozen=True)
class Restarts:
    """A server's restarts in place so far, and whether its latest start serves yet (RunDir.server_restarts)."""

    count: int = 0
    serving: bool = True


def read_restarts(path: Path) -> Restarts:
    return Restarts(**json.loads(path.read_text())) if path.exists() else Restarts()


def write_restarts(path: Path, restarts: Restarts) -> None:
    write_text(path, json.dumps(asdict(restarts)) + "\n")
