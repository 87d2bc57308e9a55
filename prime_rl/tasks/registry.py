"""Every kind of task (`task.name`): how it loads, how it scores a completion and which key names its data.
`mix` is the one composite kind, made of sources of the others. This is the one module that imports every loader;
the loaders import only task.py and rewards.py."""

from collections.abc import Callable
from dataclasses import dataclass

from prime_rl.config.schema import MIX, TaskConfig, TaskSourceConfig
from prime_rl.config.user_error import check
from prime_rl.tasks.builtin import check_builtin, judge_task, reverse_task, sort_task
from prime_rl.tasks.gym_env import episode_scorer, load_gym_task
from prime_rl.tasks.hf import load_hf_task
from prime_rl.tasks.mix import load_mix, mix_scorer
from prime_rl.tasks.reasoning_gym_task import entry_scorer, load_reasoning_gym_task
from prime_rl.tasks.rewards import answer_scorer
from prime_rl.tasks.task import Task
from prime_rl.tasks.verifiers_adapter import env_scorer, load_verifiers_task


@dataclass(frozen=True)
class DataKey:
    """The source key that names a kind's data, and how a missing one is reported."""

    key: str  # path | dataset | env
    what: str  # what it names, e.g. "its data"
    value: str  # what to set it to, e.g. "<name>"


@dataclass(frozen=True)
class TaskKind:
    load: Callable[[TaskConfig], Task]
    scorer: Callable[[TaskConfig], Callable]  # (completion, example) -> reward; built in each reward worker
    data: DataKey | None = None  # None: the kind makes its own prompts
    validate: Callable[[TaskConfig], None] | None = None  # built-in: checked without generating its prompts


HF_DATA = DataKey("path", "its data", "<file, dir or Hub id>")
KINDS: dict[str, TaskKind] = {
    "reverse": TaskKind(reverse_task, answer_scorer, validate=check_builtin),
    "sort": TaskKind(sort_task, answer_scorer, validate=check_builtin),
    "judge": TaskKind(judge_task, answer_scorer, validate=check_builtin),
    "hf": TaskKind(load_hf_task, answer_scorer, HF_DATA),
    "jsonl": TaskKind(load_hf_task, answer_scorer, HF_DATA),
    "reasoning_gym": TaskKind(load_reasoning_gym_task, entry_scorer, DataKey("dataset", "a dataset", "<name>")),
    "verifiers": TaskKind(load_verifiers_task, env_scorer, DataKey("env", "a taskset", "<taskset id>")),
    "gym": TaskKind(load_gym_task, episode_scorer, DataKey("env", "an environment factory", "<module>:<factory>")),
}
SOURCE_KINDS = tuple(KINDS)  # what a source of a mix can be
TASK_KINDS = (*SOURCE_KINDS, MIX)


def load_task(cfg: TaskConfig) -> Task:
    """The task of kind `task.name`: its train and eval splits and its verifier, in process."""
    if cfg.name == MIX:
        return load_mix(cfg, load_task)
    return KINDS[cfg.name].load(cfg)


def make_verifier(cfg: TaskConfig) -> Callable:
    """(completion, example) -> reward for the task, without loading its splits: each reward worker builds its own."""
    if cfg.name == MIX:
        return mix_scorer(cfg, make_verifier)
    return KINDS[cfg.name].scorer(cfg)


def check_data_key(key: str, src: TaskSourceConfig) -> None:
    """A ConfigError if the source (config key `key`) does not name the data its kind needs."""
    data = KINDS[src.name].data
    if data is not None:
        check(
            bool(getattr(src, data.key)),
            [f"{key}.{data.key}"],
            f"task={src.name} needs {data.what}",
            f"set {key}.{data.key}={data.value}",
        )


def train_sizes(cfg: TaskConfig) -> list[int]:
    """Each source's number of train prompts, from the task built once (a ConfigError if it cannot be); a built-in
    task is only checked, since it has num_train prompts by construction."""
    kind = KINDS.get(cfg.name)
    if kind is not None and kind.validate is not None:
        kind.validate(cfg)
        return [cfg.num_train]
    task = load_task(cfg)
    return [len(part) for part in task.by_source.values()] if task.weights else [len(task.train)]
