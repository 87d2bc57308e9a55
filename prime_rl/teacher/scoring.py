"""A teacher that scores the student's tokens (vLLM prompt logprobs), or its text in the teacher's own tokens where
the tokenizers differ (teacher/alignment.py), after checks that it can."""

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prime_rl.config.modes import RolloutSource, Scorer, distill_top_k, example_mode, modes_with
from prime_rl.config.schema import Config, TeacherAlignment, TeacherKind
from prime_rl.config.teachers import DEFAULT, source_teachers
from prime_rl.config.user_error import check, first_line
from prime_rl.inference.client import InferenceClient, InferenceError, TopLogprobs
from prime_rl.inference.server import vocab_size
from prime_rl.models.recipe import student_dir, teacher_dir
from prime_rl.models.tokenizer_files import same_tokenizer_files
from prime_rl.teacher.alignment import unreadable
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


TOKENS_FIX = (
    "fix: set teacher.alignment=auto to compare them on text (docs/cross_tokenizer.md), or learn from its answers"
)


def scoring_modes() -> str:
    """The modes whose teacher scores the student's tokens, as a message names them (opd)."""
    return modes_with(lambda m: m.scorer == Scorer.teacher)


def learn_from_answers() -> str:
    return f"learn from its answers (training_mode={modes_with(lambda m: m.rollouts == RolloutSource.teacher)})"


def vllm_teacher_fix() -> str:
    return f"fix: serve the teacher with vLLM, or {learn_from_answers()}"


@dataclass
class Alignment:
    """How a scoring teacher's scores meet the student's tokens (teacher.alignment resolved), and why."""

    kind: TeacherAlignment  # tokens | text
    reason: str
    tokenizer: str | Path | None = None  # text: where the teacher's tokenizer loads from


def probe_ids(tokenizer, example, max_model_len: int) -> list[int]:
    """What a teacher is asked to score before training: the task's first prompt and its answer, in the student's
    tokens, as long as a rollout can be."""
    from prime_rl.models.chat import answer_ids, prompt_ids  # transformers: not for a launch's validation

    ids = prompt_ids(tokenizer, example.messages) + answer_ids(tokenizer, example.messages, example.answer)
    return ids[: max_model_len - 1]


def scored_examples(run: Config, task, name: str) -> list:
    """The train examples teacher `name` scores (their source's mode takes a teacher's scores, and it teaches it)."""
    teachers = source_teachers(run)
    return [
        ex
        for ex in task.train
        if example_mode(run, ex).scorer == Scorer.teacher and teachers.get(ex.source, DEFAULT) == name
    ]


async def resolve_alignment(
    cfg: Config, client: InferenceClient, model: str, student_tok: Callable, examples: list
) -> Alignment:
    """teacher.alignment of a teacher (`cfg`: as it sees the run) that scores `examples`' samples, checked: tokens
    where its tokenizer is the student's (its files; an endpoint's /tokenize), else text, where the teacher reads
    their text back. A local teacher's server need not be up."""
    local = cfg.teacher.kind == TeacherKind.local_vllm
    if local:
        text, difference = None, local_difference(cfg, student_tok)
    else:
        text = probe_text(student_tok(), examples[0], cfg)
        difference = await remote_difference(client, model, student_tok(), text)
    wanted = cfg.teacher.alignment
    if wanted != TeacherAlignment.text and difference is None:
        return Alignment(TeacherAlignment.tokens, "its tokenizer is the student's")
    if wanted == TeacherAlignment.tokens:
        raise TeacherError(
            f"the teacher's tokenizer at {teacher_dir(cfg) if local else client.root} differs from the student's "
            f"({difference}) [teacher.alignment]: teacher.alignment=tokens scores the student's own tokens; "
            + TOKENS_FIX,
            ["teacher.alignment"],
        )
    source = teacher_tokenizer_source(cfg, difference)
    if not local:
        await check_endpoint_tokenizer(client, model, teacher_tokenizer(source), text, source)
    check_text_alignment(examples, teacher_tokenizer(source), source)
    reason = (
        "teacher.alignment=text" if difference is None else f"its tokenizer differs from the student's: {difference}"
    )
    return Alignment(TeacherAlignment.text, reason, source)


async def probe_teacher(
    client: InferenceClient, model: str, alignment: Alignment, student_tok, example, cfg: Config
) -> None:
    """One scoring request before training (`example`'s prompt and answer), in the tokens the teacher is sent."""
    if alignment.kind == TeacherAlignment.text:
        text = probe_text(student_tok, example, cfg)
        tokens = teacher_tokenizer(alignment.tokenizer).encode(text, add_special_tokens=False)
    else:
        tokens = probe_ids(student_tok, example, cfg.inference.max_model_len)
    await probe_prompt_logprobs(client, model, tokens[: cfg.inference.max_model_len - 1])


def probe_text(student_tok, example, cfg: Config) -> str:
    return student_tok.decode(probe_ids(student_tok, example, cfg.inference.max_model_len))


@functools.cache
def teacher_tokenizer(source: str | Path):
    """A teacher's tokenizer with its chat template, loaded once per source (a model dir or Hub id)."""
    from prime_rl.models.chat import chat_tokenizer  # transformers: not for a launch's validation

    return chat_tokenizer(source, {})


def local_difference(cfg: Config, student_tok: Callable) -> str | None:
    """What tells a local teacher's tokenizer from the student's: None (the same), `vocab` or `special tokens`.
    Files the same as the student's are, and neither tokenizer is loaded (`student_tok` loads the student's)."""
    if same_tokenizer_files(student_dir(cfg), teacher_dir(cfg)):
        return None
    student, teacher = student_tok(), teacher_tokenizer(teacher_dir(cfg))
    if student.get_vocab() != teacher.get_vocab():
        return "vocab"
    return "special tokens" if student.all_special_tokens != teacher.all_special_tokens else None


async def remote_difference(client: InferenceClient, model: str, student_tok, text: str) -> str | None:
    """An endpoint's tokenizer, seen through vLLM's /tokenize: None where `text` splits into the student's ids."""
    same = await endpoint_tokens(client, model, text) == student_tok.encode(text, add_special_tokens=False)
    return None if same else "its /tokenize splits the task's text otherwise"


def teacher_tokenizer_source(cfg: Config, difference: str | None) -> str | Path:
    """Where a text-aligned teacher's tokenizer loads from: a local teacher's model dir; an external teacher's
    teacher.tokenizer (the student's where it tokenizes as the student does)."""
    t = cfg.teacher
    if t.kind == TeacherKind.local_vllm:
        return teacher_dir(cfg)
    if t.tokenizer:
        return t.tokenizer
    if difference is None:
        return student_dir(cfg)
    raise TeacherError(
        f"teacher at {t.base_url} tokenizes differently from the student, and {scoring_modes()} then compares the two "
        "on text in the teacher's tokens [teacher.tokenizer]; fix: set teacher.tokenizer to a model dir or Hub id "
        f"with the teacher's tokenizer, or {learn_from_answers()}"
    )


async def check_endpoint_tokenizer(client: InferenceClient, model: str, teacher_tok, text: str, source) -> None:
    """teacher.tokenizer tokenizes as the endpoint does (seen through its /tokenize)."""
    if await endpoint_tokens(client, model, text) != teacher_tok.encode(text, add_special_tokens=False):
        raise TeacherError(
            f"teacher.tokenizer {source} tokenizes otherwise than the teacher at {client.root}; fix: point "
            "teacher.tokenizer at the served model's own tokenizer"
        )


def check_text_alignment(examples: list, teacher_tok, source) -> None:
    """Scoring on text: the teacher's tokenizer reads back each example's prompt and answer (a character it maps to
    <unk> would be lost to the comparison)."""
    texts = [
        (f"train example {i}'s {part}", text)
        for i, ex in enumerate(examples)
        for part, text in [("prompt", ex.prompt), ("answer", ex.answer), ("system message", ex.system or "")]
    ]
    found = unreadable(teacher_tok, [text for _, text in texts])
    where, rest = (texts[found[0]][0], found[1]) if found else ("", "")
    check(
        found is None,
        ["teacher.model", "task"],
        f"the teacher's tokenizer at {source} does not read back {where} from {rest!r}, and {scoring_modes()} "
        "compares the teacher and the student on the same text",
        f"give {scoring_modes()} a teacher whose tokenizer covers the task's text, or {learn_from_answers()}",
    )


async def endpoint_tokens(client: InferenceClient, model: str, text: str) -> list[int]:
    """The ids a vLLM endpoint's /tokenize gives `text`."""
    try:
        data = await client.post("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False}, root=True)
        return data["tokens"]
    except (InferenceError, KeyError, TypeError) as e:
        raise TeacherError(
            f"cannot check the teacher's tokenizer at {client.root}/tokenize ({scoring_modes()} needs a vLLM "
            f"teacher): {first_line(e)[:300]}; {vllm_teacher_fix()}"
        ) from e


async def probe_prompt_logprobs(client: InferenceClient, model: str, token_ids: list[int]) -> None:
    """One scoring request before training: the endpoint must return a logprob for every token we send."""
    try:
        [scores] = await client.prompt_logprobs(model, [token_ids])
    except InferenceError as e:
        raise TeacherError(
            f"teacher endpoint {client.base_url} cannot score prompts ({scoring_modes()} needs vLLM "
            f"prompt_logprobs): {first_line(e)[:300]}; {vllm_teacher_fix()}"
        ) from e
    if any(s is None for s in scores[1:]):
        raise TeacherError(
            f"teacher endpoint {client.base_url} returned incomplete prompt logprobs; {vllm_teacher_fix()}"
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
            f"teacher with vllm serve --max-logprobs {k}",
            ["trainer.loss.distill_top_k"],
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
