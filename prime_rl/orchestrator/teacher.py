"""The teacher: per-token scoring of student rollouts (opd) and rollouts of its own (sft)."""

import os
from pathlib import Path

from prime_rl.config.schema import Config, TeacherKind
from prime_rl.inference.client import InferenceClient, InferenceError
from prime_rl.protocol.servers import SERVER_KEY_ENV, TEACHER_MODEL_NAME


class TeacherError(RuntimeError):
    """The teacher cannot serve this run (wrong tokenizer, no prompt logprobs)."""


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
        url, api_key_env=key_env, headers=headers, timeout_s=t.request_timeout_s, max_retries=t.max_retries
    )
    return client, model


async def teacher_logprobs(
    client: InferenceClient, model: str, pairs: list[tuple[list[int], list[int]]]
) -> list[list[float]]:
    """For each (prompt, completion): log p_T of each completion token given everything before it."""
    scores = await client.prompt_logprobs(model, [p + c for p, c in pairs])
    return [[float(x) for x in s[len(p) :]] for s, (p, _) in zip(scores, pairs)]


def check_same_tokenizer(student_tok, teacher_dir: Path) -> None:
    """A local teacher's tokenizer files must define the student's vocab and special tokens exactly."""
    from transformers import AutoTokenizer

    teacher_tok = AutoTokenizer.from_pretrained(teacher_dir)
    if student_tok.get_vocab() != teacher_tok.get_vocab():
        raise TeacherError(
            f"teacher tokenizer at {teacher_dir} differs from the student's (vocab); "
            "opd scores tokens, so they must match"
        )
    if student_tok.all_special_tokens != teacher_tok.all_special_tokens:
        raise TeacherError(
            f"teacher tokenizer at {teacher_dir} has other special tokens than the student's; they must match"
        )


async def check_same_tokenization(client: InferenceClient, model: str, student_tok, probe_text: str) -> None:
    """A remote teacher's tokenizer, seen through vLLM's /tokenize: the probe must split into the student's ids."""
    root = client.root
    try:
        data = await client.post_root("/tokenize", {"model": model, "prompt": probe_text, "add_special_tokens": False})
        teacher_ids = data["tokens"]
    except (InferenceError, KeyError, TypeError) as e:
        raise TeacherError(
            f"cannot check the teacher's tokenizer at {root}/tokenize (opd needs a vLLM teacher): {e}"
        ) from e
    if teacher_ids != student_tok.encode(probe_text, add_special_tokens=False):
        raise TeacherError(f"teacher at {root} tokenizes differently from the student; opd needs the same tokenizer")


async def probe_prompt_logprobs(client: InferenceClient, model: str, token_ids: list[int]) -> None:
    """One scoring request before training: the endpoint must return a logprob for every token we send."""
    try:
        [scores] = await client.prompt_logprobs(model, [token_ids])
    except InferenceError as e:
        raise TeacherError(
            f"teacher endpoint {client.base_url} cannot score prompts (opd needs vLLM prompt_logprobs): {e}"
        ) from e
    if any(s is None for s in scores[1:]):
        raise TeacherError(f"teacher endpoint {client.base_url} returned incomplete prompt logprobs")
