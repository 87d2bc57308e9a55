"""The model dirs and Hub ids a run names, and how a GPU server's attention heads split over its GPUs."""

import json
from pathlib import Path

from prime_rl.config.judge import judge_teacher
from prime_rl.config.schema import Config, TeacherKind, Verdict
from prime_rl.config.teachers import (
    local_teachers,
    teacher_config,
    teacher_key,
    teacher_view,
)
from prime_rl.config.user_error import check
from prime_rl.inference.server import attention_heads, tensor_parallel_fits
from prime_rl.launcher.gpus import gpus_per_teacher
from prime_rl.models.hub import hub_model_problem, is_hub_id
from prime_rl.models.recipe import student_dir, teacher_dir
from prime_rl.protocol.atomic import is_complete


def check_models(cfg: Config) -> None:
    _model(cfg.model.name, cfg.model.revision, "model.name", "model.revision")
    check_teacher_model(cfg)


def check_teacher_model(cfg: Config) -> None:
    if cfg.teacher.kind == TeacherKind.local_vllm:
        _model(cfg.teacher.model, cfg.teacher.revision, "teacher.model", "teacher.revision")


def check_judge_model(cfg: Config) -> None:
    """A reward model judge is a sequence classifier (vLLM serves it through its pooling API), a chat judge is
    not: read from a local judge's config.json (a Hub id not fetched yet is left to vLLM's own error)."""
    name = judge_teacher(cfg)
    if name is None or teacher_config(cfg, name).kind != TeacherKind.local_vllm:
        return
    view = teacher_view(cfg, name)
    config = teacher_dir(view) / "config.json"
    if view.teacher.model != "tiny" and not config.is_file():
        return
    architectures = (json.loads(config.read_text()).get("architectures") or []) if config.is_file() else []
    classifier = any(a.endswith("ForSequenceClassification") for a in architectures)
    wanted = cfg.judge.verdict == Verdict.reward_model
    what = f"{view.teacher.model} ({', '.join(architectures) or 'a causal LM'})"
    key = f"{teacher_key(name)}.model"
    check(
        classifier == wanted,
        [key, "judge.verdict"],
        f"judge.verdict={cfg.judge.verdict.value} needs {'a sequence classifier' if wanted else 'a chat model'}, "
        f"and the judge is {what}",
        "name a *ForSequenceClassification model dir"
        if wanted
        else "set judge.verdict=reward_model, or judge with a chat model",
    )


def _model(name: str, revision: str | None, key: str, revision_key: str) -> None:
    """'tiny', a local model dir, or a Hub id that is in the Hugging Face cache or on the Hub."""
    if name == "tiny":
        return
    if not is_hub_id(name):
        check(
            (Path(name).expanduser() / "config.json").is_file(),
            [key],
            f"{name!r} is neither 'tiny', a local Hugging Face model dir (no config.json) nor a Hub id",
            f"use {key}=tiny, a path to a saved model, or a Hub id like Qwen/Qwen3-0.6B",
        )
        return
    problem = hub_model_problem(name, revision)
    check(
        problem is None,
        [key, revision_key] if revision else [key],
        f"{name!r} is no local model dir, and as a Hub id: {problem}",
        "download it where the cache is shared (hf download <id>), unset HF_HUB_OFFLINE, or fix the id",
    )


# vLLM's tensor parallelism, in words (inference/server.py tensor_parallel_fits)
SPLIT_RULE = "vLLM needs the GPUs to divide the heads, and to divide or be a multiple of the KV heads"


def check_tensor_parallel(cfg: Config) -> None:
    """vLLM splits a GPU server's attention heads over its GPUs (tensor parallelism) and fails as it starts where
    they do not split: the student's over inference.tp, each local teacher's over its share of num_teacher_gpus."""
    _student_split(cfg)
    local = local_teachers(cfg)
    each = gpus_per_teacher(cfg.deployment, len(local))
    for name in local if each > 1 else []:
        _teacher_split(cfg, name, each, len(local))


def _student_split(cfg: Config) -> None:
    tp, heads = cfg.inference.tp, _heads(cfg, cfg.model.name, student_dir(cfg))
    if tp == 1 or heads is None:
        return
    check(
        tensor_parallel_fits(*heads, tp),
        ["inference.tp", "model.name"],
        f"the student server splits {_heads_text(cfg.model.name, heads)} over inference.tp={tp} GPUs; {SPLIT_RULE}",
        f"use inference.tp={_largest_split(heads, tp)} (or another of {_splits(heads)}), "
        "and inference.dp * inference.tp = deployment.num_infer_gpus",
    )


def _teacher_split(cfg: Config, name: str, each: int, teachers: int) -> None:
    view = teacher_view(cfg, name)
    heads = _heads(cfg, view.teacher.model, teacher_dir(view))
    if heads is None:
        return
    key = teacher_key(name)
    check(
        tensor_parallel_fits(*heads, each),
        [f"{key}.model", "deployment.num_teacher_gpus"],
        f"{key}'s server splits {_heads_text(view.teacher.model, heads)} over its {each} GPUs"
        + (f" (num_teacher_gpus split between {teachers} local teachers)" if teachers > 1 else "")
        + f"; {SPLIT_RULE}",
        f"give each local teacher a number of GPUs that splits them ({_splits(heads)}): "
        f"deployment.num_teacher_gpus={teachers * _largest_split(heads, each)}",
    )


def _heads(cfg: Config, name: str, model_dir: Path) -> tuple[int, int] | None:
    """A server's (attention heads, KV heads): from its model dir's config.json, or the built-in model's recipe
    before it is built; None for a Hub id not fetched yet (checked again at job time, on its snapshot)."""
    if (model_dir / "config.json").is_file():
        heads = attention_heads(model_dir)
        return heads if heads[0] else None  # no attention heads named: vLLM checks nothing either
    tiny = cfg.model.tiny  # a built-in teacher is the student's architecture
    return (tiny.num_heads, tiny.num_kv_heads) if name == "tiny" else None


def _splits(heads: tuple[int, int]) -> str:
    """The GPU counts vLLM can split these heads over."""
    return ", ".join(str(tp) for tp in range(1, heads[0] + 1) if tensor_parallel_fits(*heads, tp))


def _largest_split(heads: tuple[int, int], most: int) -> int:
    return max(tp for tp in range(1, most + 1) if tensor_parallel_fits(*heads, tp))


def _heads_text(model: str, heads: tuple[int, int]) -> str:
    return f"{model}'s {heads[0]} attention heads ({heads[1]} KV heads)"


def on_disk(name: str, path: Path) -> bool:
    """A model the launch can read now: a model dir, or a tiny model already built (a Hub model is read at job time,
    from its snapshot)."""
    return not is_hub_id(name) and (name != "tiny" or is_complete(path))
