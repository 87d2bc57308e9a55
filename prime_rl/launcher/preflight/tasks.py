"""The task as configured: it builds, its sources and eval tasks, the warm start's data, reference answers."""

from prime_rl.config.evaluation import eval_task_config
from prime_rl.config.modes import (
    Mode,
    modes_with,
    source_modes,
)
from prime_rl.config.schema import Config, TaskConfig, TaskSourceConfig, TeacherKind
from prime_rl.config.sources import mix_sources, source_label
from prime_rl.config.user_error import check, keys_renamed
from prime_rl.models.recipe import WARM_START_ENVS
from prime_rl.tasks import Task
from prime_rl.tasks.gym_env import demonstrates
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


def check_task(cfg: Config) -> None:
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


def check_eval_tasks(cfg: Config) -> None:
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


def check_answers(cfg: Config, task: Task) -> None:
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


def plays_episodes(mode: Mode) -> bool:
    """The student plays a source's episodes itself (its own samples, no reference answer needed)."""
    return mode.trains_sampled_policy and not mode.needs_answers
