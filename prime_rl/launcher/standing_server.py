"""A student server that outlives runs (`inference.url`): started once with `python -m prime_rl.serve <the run's
overrides>`, then used by run after run instead of a server of their own, which saves its start-up (seconds on a
tiny model, minutes on a large one) each time. A run that uses it loads its own starting weights into it first
(orchestrator/loop.py), so what an earlier run left there never reaches this one's rollouts.

Checked before any process starts (`check_standing_server`): the key is in its env var, the server answers with
it, serves the student, and has the context the run plans for its student server."""

import logging
import os

import httpx

from prime_rl.config.schema import Config
from prime_rl.config.user_error import UserError
from prime_rl.inference.server import student_context
from prime_rl.protocol.servers import STUDENT_MODEL_NAME

TIMEOUT_S = 10.0
logging.getLogger("httpx").setLevel(logging.WARNING)  # its request line, in the launch's output, is noise


def standing_key(cfg: Config) -> str:
    """The standing server's key, from the env var the config names."""
    env = cfg.inference.api_key_env
    key = os.environ.get(env)
    if not key:
        raise UserError(
            f"{env} is not set [inference.api_key_env]: a standing student server answers only requests with its "
            f"key; fix: export {env}=<a key of your choosing> for the server and for the runs that use it"
        )
    return key


def check_standing_server(cfg: Config) -> None:
    """The server at inference.url serves the student with the key and the context this run plans."""
    url = cfg.inference.url.rstrip("/")
    fix = "start it with python -m prime_rl.serve and this run's overrides, or drop inference.url"
    headers = {"Authorization": f"Bearer {standing_key(cfg)}"}
    try:
        reply = httpx.get(f"{url}/models", headers=headers, timeout=TIMEOUT_S, trust_env=False)
    except httpx.HTTPError as e:
        raise UserError(f"no server answers at {url} [inference.url] ({type(e).__name__}); fix: {fix}") from e
    if reply.status_code != 200:
        raise UserError(
            f"the server at {url} answers {reply.status_code} to the key in {cfg.inference.api_key_env} "
            f"[inference.url, inference.api_key_env]; fix: export the key it was started with, or {fix}"
        )
    served = {m.get("id"): m for m in reply.json().get("data", [])}
    student = served.get(STUDENT_MODEL_NAME)
    if student is None:
        raise UserError(f"the server at {url} serves {sorted(served)}, not the student [inference.url]; fix: {fix}")
    if student.get("max_model_len") != student_context(cfg):
        raise UserError(
            f"the server at {url} has a context of {student.get('max_model_len')} tokens, this run plans "
            f"{student_context(cfg)} [inference.url, inference.max_model_len, training_mode]; fix: {fix}"
        )
