"""opd: the teacher scores the student's own tokens (vLLM prompt logprobs), after checks that it can."""

from pathlib import Path

from prime_rl.inference.client import InferenceClient, InferenceError
from prime_rl.teacher.client import TeacherError


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
