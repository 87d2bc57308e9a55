"""A `verifiers` (v1) taskset as a task: `task=verifiers task.env=<taskset id>` trains on the taskset's prompts and
scores each completion with the task's own rewards. The id is what verifiers itself loads: an installed module (or
`owner/name@version` hub id of one) exporting a `verifiers.v1.Taskset` subclass; `task.options` are the taskset
config's fields. This is verifiers' single-turn case (the `null` harness: system prompt + prompt, one reply), with
the rollout sampled by the student's vLLM server instead of a harness program, and scored offline: no runtime, no
sandbox, no hosted judge. Tasks that need those are refused by name when the task is built. A taskset with an Env
of its own or with toolsets is played as episodes instead (tasks/verifiers_episodes.py, tasks/verifiers_tools.py)."""

import asyncio
import inspect
import itertools
import random

from prime_rl.config.schema import TaskConfig
from prime_rl.config.user_error import ConfigError
from prime_rl.tasks.gym_env import no_verifier
from prime_rl.tasks.task import EnvSpec, Example, Task
from prime_rl.tasks.verifiers_episodes import add_nodes, empty_trace, environment, multi_turn_env, seats
from prime_rl.tasks.verifiers_tools import toolsets_of, unservable

INSTALL = "pip install -e '.[verifiers]' (the version this adapter is built against)"
EPISODE = "prime_rl.tasks.verifiers_episodes:VerifiersEpisode"  # the Gymnasium text API over a verifiers Env


def load_verifiers_task(cfg: TaskConfig) -> Task:
    """The first num_train + num_eval tasks of the taskset, shuffled by seed; num_eval of them held out. A taskset
    with an environment of its own (a multi-turn game) or with tools gives episodes (tasks/verifiers_episodes.py)."""
    taskset = open_taskset(cfg)
    try:
        tasks = list(itertools.islice(taskset, cfg.num_train + cfg.num_eval))
    except Exception as e:  # the taskset's own load() failed: its message says why
        problem = f"taskset {cfg.env!r} failed to load: {e!r}"
        raise ConfigError(["task.env", "task.options"], problem, "fix the taskset or its options") from e
    if len(tasks) < 2:
        raise ConfigError(["task.env"], f"taskset {cfg.env!r} yields {len(tasks)} task(s)", "a run needs 2 or more")
    toolsets = toolsets_of(taskset, tasks[0])
    episodic = multi_turn_env(cfg.env) is not None or bool(toolsets)
    if episodic:
        check_playable(cfg, tasks[0], toolsets)
        try:
            environment(cfg.env, dict(cfg.options))
        except Exception as e:  # its Env refused the config: its message says why
            problem = f"the environment of taskset {cfg.env!r} does not start: {e!r}"
            raise ConfigError(["task.env", "task.options"], problem, "fix the environment or its options") from e
    else:
        check_offline(cfg, tasks[0])
    indexed = list(enumerate(tasks))  # an episode's seed is its task's place in the taskset's stream
    random.Random(cfg.seed).shuffle(indexed)
    cut = min(cfg.num_eval, len(tasks) // 2)
    examples = [to_episode(cfg, task, i) if episodic else to_example(cfg, task) for i, task in indexed]
    scorer = no_verifier if episodic else taskset_scorer(taskset)
    return Task(f"verifiers/{cfg.env}", examples[cut:], examples[:cut], scorer)


def open_taskset(cfg: TaskConfig):
    """The taskset built from its config (`task.options`), as verifiers' own loader would build it."""
    try:
        import verifiers.v1 as vf
        from verifiers.v1.utils.generic import concrete_type
        from verifiers.v1.utils.loaders import taskset_class
    except ImportError as e:
        raise ConfigError(["task.name"], f"task=verifiers needs the verifiers library ({e})", INSTALL) from e
    from pydantic import ValidationError

    try:
        cls = taskset_class(cfg.env)
    except Exception as e:  # not importable, no (or several) Taskset exported, an error importing it
        first = str(e).split(". ")[0].splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(
            ["task.env"],
            f"verifiers cannot load taskset {cfg.env!r}: {first}",
            "install its module (or put it on PYTHONPATH); it must export one Taskset subclass in __all__",
        ) from e
    config_type = concrete_type(cls, vf.TasksetConfig) or vf.TasksetConfig
    try:
        return cls(config_type.model_validate({**cfg.options, "id": cfg.env}))
    except ValidationError as e:
        wrong = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        fields = ", ".join(name for name in config_type.model_fields if name != "id")
        problem = f"taskset {cfg.env!r} refuses its options ({wrong})"
        raise ConfigError(["task.options"], problem, f"set only fields {config_type.__name__} has: {fields}") from e


def has_toolsets(cfg: TaskConfig) -> bool:
    """Whether the taskset's episodes have tools (its own toolsets, or its first task's)."""
    taskset = open_taskset(cfg)
    return bool(toolsets_of(taskset, next(iter(taskset))))


def check_offline(cfg: TaskConfig, task) -> None:
    """Refuse what offline single-turn scoring cannot do, instead of silently scoring it 0."""
    needs = in_process_lacks(task)
    if not any(not takes_runtime(fn) for fn in task.hooks("reward")):
        needs.append("a runtime for every reward")
    if needs:
        raise ConfigError(
            ["task.env"],
            f"taskset {cfg.env!r} needs {', '.join(needs)}, which single-turn offline scoring does not provide",
            "use a taskset whose rewards read the task data and the reply only (see docs/how-to/own-task.md)",
        )


def check_playable(cfg: TaskConfig, task, toolsets: list) -> None:
    """Refuse what this player cannot play: more than one seat, toolsets it cannot serve in-process, and what no
    task here gets (in_process_lacks)."""
    players = seats(cfg.env)
    needs = [f"{len(players)} players ({', '.join(players)})"] if len(players) != 1 else []
    needs += unservable(toolsets) + in_process_lacks(task)
    if any(takes_runtime(fn) for fn in task.hooks("reward")):
        needs.append("a runtime for its rewards")
    if needs:
        raise ConfigError(
            ["task.env"],
            f"taskset {cfg.env!r} is played as episodes and needs {', '.join(needs)}, which the student playing it "
            "in-process does not provide",
            "use an environment of one player whose rewards read the trace and whose toolsets run locally "
            "(examples/reverse_retry_game.py, examples/vault_lookup.py)",
        )


def in_process_lacks(task) -> list[str]:
    """What of verifiers' runtime a task needs that this launcher does not run: containers, judges."""
    needs = ["a container runtime"] if task.NEEDS_CONTAINER else []
    if task.config.judges:
        needs.append("LLM judges")
    return needs


def to_episode(cfg: TaskConfig, task, index: int) -> Example:
    """A task of a multi-turn environment: its episode opens with the task's prompt (reset()'s observation)."""
    spec = EnvSpec(EPISODE, {"taskset": cfg.env, "options": dict(cfg.options)}, index, cfg.max_turns,
                   cfg.env_timeout_s, cfg.tool_parser)  # fmt: skip
    return Example("", "", cfg.system_prompt or task.data.system_prompt, env=spec)


def takes_runtime(fn) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def to_example(cfg: TaskConfig, task) -> Example:
    data = task.data
    system, prompt = split_prompt(cfg, data.prompt)
    answer = getattr(data, "answer", "")  # most tasksets' TaskData carry one; warm start trains on it
    entry = data.model_dump(mode="json")
    system = cfg.system_prompt or data.system_prompt or system  # task.system_prompt, as for every task, wins
    return Example(prompt, "" if answer is None else str(answer), system, entry=entry)


def split_prompt(cfg: TaskConfig, prompt) -> tuple[str | None, str]:
    """A string prompt, or messages that are one user turn (after an optional system message), as text."""
    from verifiers.v1.types import content_text

    if isinstance(prompt, str):
        return None, prompt
    roles = [m.role for m in prompt or []]
    if roles not in (["user"], ["system", "user"]):
        raise ConfigError(
            ["task.env"],
            f"taskset {cfg.env!r} has a prompt of roles {roles}; only a user message (after a system one) is served",
            "make the task's prompt one user message",
        )
    system = content_text(prompt[0].content) if len(prompt) == 2 else None
    return system, content_text(prompt[-1].content)


def env_scorer(cfg: TaskConfig) -> "Scorer":
    """(completion, example) -> the task's weighted reward, from the taskset task.env names; one per reward worker."""
    return taskset_scorer(open_taskset(cfg))


def taskset_scorer(taskset) -> "Scorer":
    return Scorer(type(taskset).task_type(), taskset.config.task)


class Scorer:
    def __init__(self, task_type, task_config):
        self.task_type, self.task_config = task_type, task_config

    def __call__(self, completion: str, example: Example) -> float:
        task = self.task_type(self.task_type.data_type().model_validate(example.entry), self.task_config)
        trace = reply_trace(task, example, completion)
        asyncio.run(task.score(trace))
        return trace.reward


def reply_trace(task, example: Example, completion: str):
    """A trace of one sampled reply to the example's messages: what a reward reads (last_reply, messages)."""
    from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

    prompt = [SystemMessage(content=example.system)] if example.system is not None else []
    trace = empty_trace(task)
    add_nodes(trace, [*prompt, UserMessage(content=example.prompt), AssistantMessage(content=completion)])
    trace.is_completed = True
    return trace
