"""What needs the student's tokenizer and chat template: prompt lengths, a teacher's tool calls."""

from collections.abc import Callable

from prime_rl.config.modes import (
    RolloutSource,
    context_margin,
    example_mode,
    modes_with,
    source_modes,
)
from prime_rl.config.schema import Config, TaskSourceConfig
from prime_rl.config.user_error import UserError, check
from prime_rl.launcher.preflight.tasks import plays_episodes
from prime_rl.models.prompt_lengths import prompt_lengths
from prime_rl.tasks import Task
from prime_rl.tasks.gym_env import env_factory, tool_schemas
from prime_rl.tasks.verifiers_adapter import has_toolsets


def student_tokenizer_or_error(cfg: Config):
    from prime_rl.models.chat import student_tokenizer  # transformers: only once a job runs

    try:
        return student_tokenizer(cfg)
    except (OSError, ValueError) as e:
        raise UserError(
            f"the student's tokenizer does not load [model.name]: {str(e).splitlines()[0]}; "
            "fix: point model.name at a Hugging Face model dir (or Hub id) that has its tokenizer",
            ["model.name"],
        ) from e


def check_prompt_lengths(cfg: Config, task: Task, tokenizer: Callable) -> None:
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


def check_teacher_tool_calls(cfg: Config, tokenizer: Callable) -> None:
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
            "writes its calls",
            ["model.name"],
        )


def _offers_tools(src: TaskSourceConfig) -> bool:
    """Whether the source's episodes have tools: a gym environment's `tools`, a verifiers taskset's toolsets."""
    if src.name == "gym":
        return bool(tool_schemas(env_factory(src.env)(**src.options)))
    return src.name == "verifiers" and has_toolsets(src)
