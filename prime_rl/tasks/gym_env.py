"""Multi-turn environments with the Gymnasium text API (`task=gym task.env=<module>:<factory>`).

`factory(**task.options)` returns an object with
    reset(seed: int) -> (observation: str, info: dict)
    step(action: str) -> (observation: str, reward: float, terminated: bool, truncated: bool, info: dict)
as GEM's environments have (nothing of GEM is imported: any object of that shape works). The first observation is
the episode's first user message, each later one the user message after the student's reply; the action is the
reply's text (after any reasoning block). Rewards are summed over the episode; `truncated` ends it like `terminated`;
`task.max_turns` bounds it whatever the environment says. The orchestrator plays the episodes
(orchestrator/episodes.py); this module resolves the factory, checks what it makes before anything starts, and
checks every value an environment returns.
"""

import ast
import importlib
import importlib.util
import math
from collections.abc import Callable
from pathlib import Path

from prime_rl.config.schema import TaskConfig
from prime_rl.config.user_error import ConfigError, check
from prime_rl.tasks.task import EnvSpec, Example, Task

SEED_STRIDE = 1_000_000  # task.seed s plays reset seeds s*STRIDE + 0.. (train), then the eval seeds after them
API = "reset(seed=) -> (str, dict) and step(str) -> (str, float, bool, bool, dict)"
TOOL_PARSERS = "_TOOL_PARSERS_TO_REGISTER"  # vllm/tool_parsers/__init__.py: parser name -> (module, class)
TOOL_PARSER_FIX = "use a name vLLM's --tool-call-parser takes: hermes (Qwen), llama3_json, mistral, …"


class EnvProtocolError(ValueError):
    """An environment returned something the text API does not allow."""


def load_gym_task(cfg: TaskConfig) -> Task:
    """num_train train and num_eval eval episodes, each a reset seed; the environment is made and reset once here,
    so a factory that does not exist, rejects its options or breaks the API stops the run before it starts."""
    check(cfg.max_turns >= 1, ["task.max_turns"], f"must be >= 1, got {cfg.max_turns}", "use e.g. 4")
    check(cfg.env_timeout_s > 0, ["task.env_timeout_s"], "must be > 0", "use e.g. 10")
    base = cfg.seed * SEED_STRIDE
    check_env(cfg, base)

    def example(seed: int) -> Example:
        spec = EnvSpec(cfg.env, dict(cfg.options), seed, cfg.max_turns, cfg.env_timeout_s, cfg.tool_parser)
        return Example("", "", cfg.system_prompt, env=spec)  # the prompt is reset()'s observation

    train = [example(base + i) for i in range(cfg.num_train)]
    evals = [example(base + cfg.num_train + i) for i in range(cfg.num_eval)]
    return Task(f"gym/{cfg.env}", train, evals, episode_scorer(cfg))


def env_factory(path: str) -> Callable:
    """The callable `<module>:<name>` names, or a ConfigError saying why there is none."""
    module_name, _, name = (path or "").partition(":")
    example = "e.g. task.env=prime_rl.tasks.retry_env:ReverseRetry"
    check(bool(module_name and name), ["task.env"], f"task.env={path!r} is not <module>:<factory>", example)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        fix = "install it or put it on PYTHONPATH"
        raise ConfigError(["task.env"], f"cannot import {module_name!r} ({e})", fix) from e
    factory = getattr(module, name, None)
    check(callable(factory), ["task.env"], f"{module_name} has no callable {name!r}", "name the class or function")
    return factory


def make_env(spec: EnvSpec):
    return env_factory(spec.factory)(**spec.options)


def check_env(cfg: TaskConfig, seed: int) -> None:
    """One environment made from task.options and reset to `seed`, as every episode's will be."""
    factory = env_factory(cfg.env)
    try:
        env = factory(**cfg.options)
    except Exception as e:  # a TypeError is an option it does not take; anything else, an option it refuses
        problem = f"{cfg.env}(**task.options) failed: {e}"
        raise ConfigError(["task.options"], problem, "give only the options it takes, with values it accepts") from e
    missing = [f"{m}()" for m in ("reset", "step") if not callable(getattr(env, m, None))]
    check(not missing, ["task.env"], f"{cfg.env} made a {type(env).__name__} without {' or '.join(missing)}", API)
    try:
        observation_of(env.reset(seed=seed))
    except Exception as e:
        problem = f"{cfg.env}: reset(seed={seed}) failed: {e}"
        raise ConfigError(["task.env"], problem, f"an environment needs {API}") from e
    try:
        tools = tool_schemas(env)
    except Exception as e:  # transformers' message names the tool and what its docstring or hints lack
        fix = "give each of its tools type hints and a docstring with an Args section"
        raise ConfigError(["task.env"], f"{cfg.env}'s tools have no JSON schema: {e}", fix) from e
    if tools:
        names = vllm_tool_parser_names()
        check(
            names is None or cfg.tool_parser in names,
            ["task.tool_parser"],
            f"vLLM has no tool parser {cfg.tool_parser!r}",
            TOOL_PARSER_FIX,
        )


def tool_schemas(env) -> list[dict]:
    """The JSON schemas of the tools an environment offers: its own `tool_schemas` (OpenAI format) where it lists
    them, else read off its `tools` (functions with type hints and a docstring with an Args section, which
    transformers' get_json_schema reads); none for one without tools."""
    if hasattr(env, "tool_schemas"):
        return env.tool_schemas
    from transformers.utils import get_json_schema

    return [get_json_schema(tool) for tool in getattr(env, "tools", None) or []]


def tool_parser_class(name: str):
    """vLLM's tool parser of that name (vLLM's `--tool-call-parser` names: hermes, llama3_json, mistral, …)."""
    from vllm.tool_parsers import ToolParserManager

    try:
        return ToolParserManager.get_tool_parser(name)
    except KeyError as e:
        raise ConfigError(["task.tool_parser"], f"vLLM has no tool parser {name!r}", TOOL_PARSER_FIX) from e


def vllm_tool_parser_names() -> list[str] | None:
    """The names vLLM's `--tool-call-parser` takes, read from its registry's source rather than imported: the import
    is ~8 s of CPU (vLLM's entrypoints), which every launch of a task with tools would pay before anything starts.
    None without vLLM. tests/test_vllm_args.py holds the list to vLLM's own ToolParserManager."""
    vllm = importlib.util.find_spec("vllm")
    if vllm is None:
        return None
    registry = Path(vllm.submodule_search_locations[0], "tool_parsers", "__init__.py")
    for node in ast.parse(registry.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == TOOL_PARSERS for t in node.targets):
            return sorted(ast.literal_eval(node.value))
    return None


def demonstrated(example: Example) -> tuple[list[dict], list[dict] | None]:
    """A perfect player's episode of the example: the messages from its first observation on (the environment's
    `demonstration()` after reset), and the tools' schemas (None: no tools)."""
    env = make_env(example.env)
    observation = observation_of(env.reset(seed=example.env.seed))
    messages = [*example.messages[:-1], {"role": "user", "content": observation}, *env.demonstration()]
    return messages, tool_schemas(env) or None


def demonstrates(cfg: TaskConfig) -> bool:
    """Whether the environment can show a perfect player's turns (`demonstration()`): what a built-in model can
    warm-start on."""
    return callable(getattr(env_factory(cfg.env)(**cfg.options), "demonstration", None))


def observation_of(reset_result) -> str:
    """reset()'s observation, or EnvProtocolError."""
    if not (isinstance(reset_result, tuple) and len(reset_result) == 2):
        raise EnvProtocolError(f"reset() returned {type(reset_result).__name__}, not (observation, info)")
    return observation_text(reset_result[0])


def outcome_of(step_result) -> tuple[str, float, bool]:
    """(observation, reward, whether the episode ended) from step()'s 5-tuple, or EnvProtocolError."""
    if not (isinstance(step_result, tuple) and len(step_result) == 5):
        raise EnvProtocolError(
            f"step() returned {type(step_result).__name__}, not (observation, reward, terminated, truncated, info)"
        )
    observation, reward, terminated, truncated, _ = step_result
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise EnvProtocolError(f"step() returned the reward {reward!r}, not a finite number")
    return observation_text(observation), float(reward), bool(terminated or truncated)


def observation_text(observation) -> str:
    if not isinstance(observation, str):
        raise EnvProtocolError(f"the observation is a {type(observation).__name__}, not a str")
    return observation


def episode_scorer(_: TaskConfig) -> Callable:
    """The verifier slot of a gym source: never called, an episode's reward is its environment's."""
    return no_verifier


def no_verifier(completion: str, example: Example) -> float:
    raise RuntimeError("an episode's reward comes from its environment, not a verifier")
