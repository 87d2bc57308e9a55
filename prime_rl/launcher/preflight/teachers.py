"""A teacher's env vars and cache dir, and how a scoring teacher meets the student's tokens (its endpoint)."""

import asyncio
import functools
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from prime_rl.config.modes import (
    Scorer,
)
from prime_rl.config.schema import Config, TeacherAlignment, TeacherKind
from prime_rl.config.teachers import (
    DEFAULT,
    named_errors,
    named_views,
    teacher_config,
    teacher_key,
    teaches,
    with_teacher,
)
from prime_rl.config.user_error import check
from prime_rl.launcher.preflight.models import on_disk
from prime_rl.launcher.preflight.tokenizers import student_tokenizer_or_error
from prime_rl.models.recipe import student_dir, teacher_dir
from prime_rl.tasks import Task
from prime_rl.tasks.registry import (
    load_task,
)
from prime_rl.teacher.client import TeacherError, teacher_client
from prime_rl.teacher.scoring import (
    local_difference,
    probe_teacher,
    resolve_alignment,
    scored_examples,
)


def check_teacher_env(cfg: Config) -> None:
    """An external teacher's key and secret headers are read from env vars, which the launch must have."""
    t = cfg.teacher
    if t.kind != TeacherKind.external:
        return
    if t.api_key_env:
        check(
            bool(os.environ.get(t.api_key_env)),
            ["teacher.api_key_env"],
            f"environment variable {t.api_key_env} (the teacher's API key) is not set",
            f"export {t.api_key_env}=<key> before launching",
        )
    for name, env in t.header_envs.items():
        check(
            bool(os.environ.get(env)),
            [f"teacher.header_envs.{name}"],
            f"environment variable {env} (the value of header {name}) is not set",
            f"export {env}=<value> before launching, or name another variable",
        )


def check_teacher_cache(cfg: Config) -> None:
    """teacher.cache_dir can be created: its nearest existing ancestor is a writable directory."""
    if cfg.teacher.kind == TeacherKind.none or not cfg.teacher.cache_dir:
        return
    cache = Path(cfg.teacher.cache_dir).expanduser().absolute()
    existing = next(d for d in (cache, *cache.parents) if d.exists())
    check(
        existing.is_dir() and os.access(existing, os.W_OK),
        ["teacher.cache_dir"],
        f"{existing} is not a writable directory",
        "point teacher.cache_dir at a directory you can write (shared by the jobs that should reuse answers)",
    )


def teacher_alignments(cfg: Config, task: Task, tokenizer: Callable) -> tuple[Config, dict[str, str]]:
    """Each teacher of an opd source scores the student's tokens where its tokenizer is the student's, else the
    student's text in its own tokens (teacher.alignment, resolved here: teacher/scoring.py); an external one also
    answers prompt logprobs. The orchestrator checks again (it may run alone), with a local teacher's server up."""
    alignments = {}
    for name, view in scoring_teachers(cfg):
        with named_errors(name):
            alignment = asyncio.run(_alignment(view, tokenizer, scored_examples(cfg, task, name)))
        cfg = with_teacher(cfg, name, replace(view.teacher, alignment=alignment.kind))
        alignments[teacher_key(name)] = f"{alignment.kind.value} ({alignment.reason})"
    return cfg, alignments


def scoring_teachers(cfg: Config) -> list[tuple[str, Config]]:
    """(name, the run as it sees it) of each teacher that scores an opd source's samples."""
    return [
        (name, view)
        for name, view in [(DEFAULT, cfg), *named_views(cfg)]
        if teaches(cfg, name, lambda m: m.scorer == Scorer.teacher)
        and teacher_config(cfg, name).kind != TeacherKind.none  # none: an evaluation's, no teacher
    ]


def check_local_alignments(cfg: Config) -> None:
    """Where the student and a local opd teacher are on disk before the job (model dirs, or tiny models an earlier run
    built), how the teacher meets the student's tokens is checked at launch, so that another tokenizer under
    teacher.alignment=tokens, or a task text the teacher cannot read back, is refused before the run dir is touched;
    else at job time, once the models are built (check_with_student_tokenizer). An external teacher's endpoint is
    asked at job time, from where the job runs."""
    local = [
        (name, view)
        for name, view in scoring_teachers(cfg)
        if view.teacher.kind == TeacherKind.local_vllm and on_disk(view.teacher.model, teacher_dir(view))
    ]
    if not local or not on_disk(cfg.model.name, student_dir(cfg)):
        return
    tokenizer, task = (
        functools.cache(lambda: student_tokenizer_or_error(cfg)),
        functools.cache(lambda: load_task(cfg.task)),
    )
    for name, view in local:
        with named_errors(name):
            if view.teacher.alignment != TeacherAlignment.text and local_difference(view, tokenizer) is None:
                continue  # it scores the student's own tokens: nothing to refuse, no task to build for it
            # a local teacher's alignment asks no endpoint: no client
            asyncio.run(resolve_alignment(view, None, "", tokenizer, scored_examples(cfg, task(), name)))


async def _alignment(cfg: Config, tokenizer: Callable, examples: list):
    client, model = teacher_client(cfg)
    try:
        alignment = await resolve_alignment(cfg, client, model, tokenizer, examples)
        if cfg.teacher.kind != TeacherKind.local_vllm:  # a local one's server is not up yet
            await probe_teacher(client, model, alignment, tokenizer(), examples[0], cfg)
        return alignment
    finally:
        await client.close()


def check_reward_model_endpoint(view: Config, name: str) -> None:
    """A hosted reward model takes no chat, so it is not probed as a teacher is: it lists its models, or the job
    stops here in one line."""
    if view.teacher.kind != TeacherKind.external:
        return
    client, _ = teacher_client(view)

    async def listed() -> bool:
        try:
            return await client.serves_models()
        finally:
            await client.close()

    if not asyncio.run(listed()):
        raise TeacherError(
            f"the reward model's endpoint {view.teacher.base_url} does not list its models (GET /models); "
            f"fix: start it, or correct {teacher_key(name)}.base_url"
        )
