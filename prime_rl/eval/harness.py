"""Standard benchmarks through lm-evaluation-harness (the `harness` extra, `lm-eval`): the served model asked by
lm-eval's own OpenAI-compatible clients, `local-chat-completions` (the server applies the model's chat template;
tasks that generate) or `local-completions` (raw text, loglikelihood too: multiple-choice tasks), on the tasks named
(lm-eval's own, or the YAML tasks of an --harness-include dir); each task's metrics join the results as a row."""

from pathlib import Path

from prime_rl.config.extras import import_extra
from prime_rl.config.user_error import UserError

APIS = {"chat": ("local-chat-completions", "chat/completions"), "completions": ("local-completions", "completions")}
CONCURRENT = 8  # requests in flight: the chat client sends one prompt per request


def task_manager(include: Path | None):
    """lm-eval's task index (its own tasks and those of `include`); a one-line error where lm-eval is missing."""
    tasks = import_extra("lm_eval.tasks", "harness", "--harness (lm-evaluation-harness)")
    return tasks.TaskManager(include_path=str(include) if include else None, include_defaults=include is None)


def check_harness(names: list[str], include: Path | None) -> None:
    """Every task named is one lm-eval knows, before any server starts."""
    if include is not None and not include.is_dir():
        raise UserError(
            f"--harness-include {include}: no such dir; fix: give the dir of your lm-eval task YAMLs",
            ["--harness-include"],
        )
    known = set(task_manager(include).all_tasks)
    unknown = [n for n in names if n not in known]
    if unknown:
        where = f"in {include}" if include else "among lm-eval's tasks"
        raise UserError(
            f"--harness {', '.join(unknown)}: no such task {where}; fix: name a task lm-eval lists there "
            "(lm-eval ls tasks), or add its YAML to --harness-include",
            ["--harness"],
        )


def harness_rows(
    names: list[str], include: Path | None, api: str, served: dict, limit: int, max_length: int
) -> list[dict]:
    """One row per task: lm-eval's metrics (`lm-eval/<metric>`, or `lm-eval/<metric>/<filter>` where the task filters
    its answers), of the model `served` names (its URL, model name, tokenizer dir and the server's key)."""
    from lm_eval import simple_evaluate

    model, route = APIS[api]
    model_args = {
        "model": served["model"],
        "base_url": f"{served['url']}/{route}",
        "tokenizer": served["tokenizer"],
        "tokenizer_backend": "huggingface" if api == "completions" else None,
        "header": {"Authorization": f"Bearer {served['key']}"},
        "num_concurrent": CONCURRENT,
        "max_length": max_length,
    }
    run = {"limit": limit, "apply_chat_template": api == "chat", "log_samples": False}
    out = simple_evaluate(model=model, model_args=model_args, tasks=names, task_manager=task_manager(include), **run)
    return [
        {"task": f"lm-eval/{task}", **{metric_name(key): v for key, v in metrics.items() if is_metric(v)}}
        for task, metrics in out["results"].items()
    ]


def metric_name(key: str) -> str:
    """lm-eval's `exact_match,none` as lm-eval/exact_match, `exact_match,strict-match` as
    lm-eval/exact_match/strict-match."""
    metric, _, kind = key.partition(",")
    return f"lm-eval/{metric}" if kind in ("", "none") else f"lm-eval/{metric}/{kind}"


def is_metric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
