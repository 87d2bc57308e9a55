"""Where the teacher is: the client of the configured teacher, and what names it in a cache key."""

import hashlib
import json
import os
from pathlib import Path

from prime_rl.config.layout import server_dtype
from prime_rl.config.schema import Config, TeacherKind
from prime_rl.config.timeouts import teacher_request_timeout_s
from prime_rl.config.user_error import UserError
from prime_rl.inference.client import InferenceClient
from prime_rl.protocol.servers import SERVER_KEY_ENV, TEACHER_MODEL_NAME


class TeacherError(UserError, RuntimeError):
    """The teacher cannot serve this run as configured: one line for the user, no traceback."""


def teacher_client(cfg: Config) -> tuple[InferenceClient, str]:
    """(client, model name) for the configured teacher."""
    t = cfg.teacher
    if t.kind == TeacherKind.local_vllm:
        # base_url: set by the multi-node plan (the teacher's server is on another node)
        url = t.base_url or f"http://{cfg.inference.host}:{t.port}/v1"
        model, key_env = TEACHER_MODEL_NAME, SERVER_KEY_ENV
    else:
        url, model, key_env = t.base_url, t.model, t.api_key_env
    headers = t.headers | {name: os.environ[env] for name, env in t.header_envs.items()}
    client = InferenceClient(
        url,
        api_key_env=key_env,
        headers=headers,
        timeout_s=teacher_request_timeout_s(cfg),
        max_retries=t.max_retries,
        max_concurrency=t.max_concurrency,
        rate_limit_wait_s=t.rate_limit_wait_s,
    )
    return client, model


def teacher_identity(cfg: Config) -> str:
    """What the teacher's answers and scores depend on besides the request: an external endpoint's URL and model
    (name another model when its weights change); a local teacher's model dir (a built-in model's dir names its
    recipe, a Hub snapshot its commit) with its files' names, sizes and times (weights rewritten in place), the
    dtype its server computes in and its extra vLLM arguments; not its port."""
    t = cfg.teacher
    if t.kind == TeacherKind.local_vllm:
        from prime_rl.models import teacher_dir

        model = teacher_dir(cfg)
        dtype = server_dtype(cfg, on_gpu=bool(cfg.deployment.num_teacher_gpus))
        return json.dumps([str(model), files_fingerprint(model), dtype, t.extra_args])
    return f"{t.base_url.rstrip('/')}#{t.model}"


def files_fingerprint(model_dir: Path) -> str:
    """A digest of the names, sizes and modification times of a model dir's files (a Hub snapshot's links: their
    blobs'); empty for a dir not there yet."""
    files = sorted(p for p in model_dir.iterdir() if p.is_file()) if model_dir.is_dir() else []
    stats = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:16] if stats else ""
