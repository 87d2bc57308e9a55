"""opd: the teacher scores the student's own tokens (vLLM prompt logprobs), after checks that it can."""

import asyncio
from collections.abc import Callable
from pathlib import Path

from prime_rl.config.modes import distill_top_k
from prime_rl.config.schema import Config, TeacherKind
from prime_rl.config.user_error import check, first_line
from prime_rl.inference.client import InferenceClient, InferenceError, TopLogprobs
from prime_rl.inference.server import vocab_size
from prime_rl.models.tokenizer_files import same_tokenizer_files
from prime_rl.teacher.client import TeacherError, teacher_client


async def teacher_logprobs(
    client: InferenceClient, model: str, pairs: list[tuple[list[int], list[int]]], top_k: int = 0
) -> list[tuple[list[float], TopLogprobs | None]]:
    """For each (prompt, completion): log p_T of each completion token given everything before it, and with
    `top_k` the teacher's top_k most likely tokens at each of those positions (None without), in one request."""
    sequences = [p + c for p, c in pairs]
    if top_k:
        scores = await client.prompt_top_logprobs(model, sequences, top_k)
    else:
        scores = [(token, None) for token in await client.prompt_logprobs(model, sequences)]
    return [
        ([float(x) for x in token[len(p) :]], completion_top(top, len(p)))
        for (token, top), (p, _) in zip(scores, pairs)
    ]


def completion_top(top: TopLogprobs | None, prompt_length: int) -> TopLogprobs | None:
    """The completion's share of a sequence's top-k (which has no entry for position 0)."""
    if top is None:
        return None
    start = prompt_length - 1
    return TopLogprobs(top.ids[start:], top.logprobs[start:])


SAME_FAMILY_FIX = "fix: give opd a teacher with the student's tokenizer, or learn from its answers (training_mode=sft)"
VLLM_TEACHER_FIX = "fix: serve the teacher with vLLM, or learn from its answers (training_mode=sft)"


def probe_ids(tokenizer, example, max_model_len: int) -> list[int]:
    """What a teacher is asked to score before training: the task's first prompt and its answer, in the student's
    tokens, as long as a rollout can be."""
    from prime_rl.models.chat import answer_ids, prompt_ids  # transformers: not for a launch's validation

    ids = prompt_ids(tokenizer, example.messages) + answer_ids(tokenizer, example.messages, example.answer)
    return ids[: max_model_len - 1]


async def check_remote_scorer(client: InferenceClient, model: str, student_tok, probe: list[int]) -> None:
    """A teacher behind an endpoint scores the student's tokens: it tokenizes the probe as the student does and
    returns a logprob for each of its tokens."""
    await check_same_tokenization(client, model, student_tok, student_tok.decode(probe))
    await probe_prompt_logprobs(client, model, probe)


def check_same_tokenizer(student_tok: Callable, student_dir: Path, teacher_dir: Path) -> None:
    """A local teacher's tokenizer files must define the student's vocab and special tokens exactly. Files the
    same as the student's do, and neither tokenizer is loaded (`student_tok` loads the student's)."""
    if same_tokenizer_files(student_dir, teacher_dir):
        return
    from transformers import AutoTokenizer

    student_tok, teacher_tok = student_tok(), AutoTokenizer.from_pretrained(teacher_dir)
    if student_tok.get_vocab() != teacher_tok.get_vocab():
        raise TeacherError(
            f"teacher tokenizer at {teacher_dir} differs from the student's (vocab), and opd scores the student's "
            f"tokens; {SAME_FAMILY_FIX}"
        )
    if student_tok.all_special_tokens != teacher_tok.all_special_tokens:
        raise TeacherError(
            f"teacher tokenizer at {teacher_dir} has other special tokens than the student's; {SAME_FAMILY_FIX}"
        )


async def check_same_tokenization(client: InferenceClient, model: str, student_tok, probe_text: str) -> None:
    """A remote teacher's tokenizer, seen through vLLM's /tokenize: the probe must split into the student's ids."""
    root = client.root
    try:
        data = await client.post_root("/tokenize", {"model": model, "prompt": probe_text, "add_special_tokens": False})
        teacher_ids = data["tokens"]
    except (InferenceError, KeyError, TypeError) as e:
        raise TeacherError(
            f"cannot check the teacher's tokenizer at {root}/tokenize (opd needs a vLLM teacher): "
            f"{first_line(e)[:300]}; {VLLM_TEACHER_FIX}"
        ) from e
    if teacher_ids != student_tok.encode(probe_text, add_special_tokens=False):
        raise TeacherError(f"teacher at {root} tokenizes differently from the student; {SAME_FAMILY_FIX}")


async def probe_prompt_logprobs(client: InferenceClient, model: str, token_ids: list[int]) -> None:
    """One scoring request before training: the endpoint must return a logprob for every token we send."""
    try:
        [scores] = await client.prompt_logprobs(model, [token_ids])
    except InferenceError as e:
        raise TeacherError(
            f"teacher endpoint {client.base_url} cannot score prompts (opd needs vLLM prompt_logprobs): "
            f"{first_line(e)[:300]}; {VLLM_TEACHER_FIX}"
        ) from e
    if any(s is None for s in scores[1:]):
        raise TeacherError(
            f"teacher endpoint {client.base_url} returned incomplete prompt logprobs; {VLLM_TEACHER_FIX}"
        )


def check_top_k_served(cfg: Config) -> None:
    """distill=topk: an external endpoint returns k logprobs per position, asked once before anything starts
    (vLLM refuses more than its --max-logprobs, 20 by default); a local teacher is started with enough."""
    k = distill_top_k(cfg)
    if not k or cfg.teacher.kind != TeacherKind.external:
        return
    asyncio.run(probe_top_k(cfg, k))


async def probe_top_k(cfg: Config, k: int) -> None:
    client, model = teacher_client(cfg)
    try:
        await client.prompt_top_logprobs(model, [[0, 1]], k)  # ids every vocabulary has
    except InferenceError as e:
        raise TeacherError(
            f"teacher endpoint {client.base_url} does not return {k} logprobs per token "
            f"[trainer.loss.distill_top_k]: {str(e)[:300]}; fix: lower trainer.loss.distill_top_k, or serve the "
            f"teacher with vllm serve --max-logprobs {k}"
        ) from e
    finally:
        await client.close()


def check_top_k_vocab(cfg: Config) -> None:
    """distill=topk from a local teacher: its vocabulary holds k ids (vLLM would accept the request and fail in its
    engine). Known at launch for the built-in teacher and a model dir, at job time for a Hub id's snapshot."""
    k = distill_top_k(cfg)
    if not k or cfg.teacher.kind != TeacherKind.local_vllm:
        return
    vocab = local_teacher_vocab(cfg)
    check(
        vocab is None or k <= vocab,
        ["trainer.loss.distill_top_k"],
        f"{k} logprobs per position is more than the teacher's {vocab}-token vocabulary",
        f"set trainer.loss.distill_top_k={vocab} (the exact KL) or less",
    )


def local_teacher_vocab(cfg: Config) -> int | None:
    """The local teacher's vocabulary size; None for a Hub id not fetched yet."""
    t = cfg.teacher
    if t.model == "tiny" and not t.path:
        return cfg.model.tiny.vocab_size
    path = Path(t.path or t.model).expanduser()
    return vocab_size(path) if (path / "config.json").is_file() else None
