"""When the orchestrator evaluates, a fact of the config that three processes read: the orchestrator (it
evaluates), the launcher's teacher probe (the temperatures the endpoint must take) and the trainer's W&B run
(whether a final evaluation line will come). The task's own eval split every orchestrator.eval.interval steps; each
of orchestrator.eval.tasks every its own interval (metrics eval/<label>/…)."""

from dataclasses import fields, replace

from prime_rl.config.schema import Config, EvalTaskConfig, TaskConfig


def due_for_eval(cfg: Config, step: int) -> bool:
    """Whether the orchestrator evaluates the task's own split at `step` (and, for step 0, after the last step
    too). Evaluation needs the verifier, so verification off means no evaluation either."""
    return due(cfg, cfg.orchestrator.eval.interval, step)


def evaluates_at(cfg: Config, step: int) -> bool:
    """Whether anything is evaluated at `step`: the task's own split or any of orchestrator.eval.tasks."""
    return due_for_eval(cfg, step) or any(due(cfg, task_interval(cfg, t), step) for t in cfg.orchestrator.eval.tasks)


def due(cfg: Config, interval: int, step: int) -> bool:
    return cfg.orchestrator.verification.enabled and bool(interval) and step % interval == 0


def task_interval(cfg: Config, task: EvalTaskConfig) -> int:
    return cfg.orchestrator.eval.interval if task.interval is None else task.interval


def eval_task_config(cfg: Config, task: EvalTaskConfig) -> Config:
    """The run's config as the evaluation of one of orchestrator.eval.tasks sees it: that task, its own k, number of
    prompts and temperature."""
    e = cfg.orchestrator.eval
    own = replace(
        e,
        num_examples=task.num_examples or e.num_examples,
        samples_per_prompt=task.samples_per_prompt or e.samples_per_prompt,
        temperature=e.temperature if task.temperature is None else task.temperature,
        tasks=[],
    )
    as_task = TaskConfig(**{f.name: getattr(task, f.name) for f in fields(TaskConfig)})
    return replace(cfg, task=as_task, orchestrator=replace(cfg.orchestrator, eval=own))
