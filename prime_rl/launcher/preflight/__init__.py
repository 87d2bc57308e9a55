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

Each raises a UserError (a ConfigError for the launch's) whose one line names the keys and the fix. This file says
when each check runs; the checks live a file per resource they read: models.py (model dirs, the Hub, attention
heads), tasks.py (the task's data), tokenizers.py (the student's tokenizer and chat template), teachers.py (a
teacher's env vars, cache and endpoint), gpus.py (the machine's GPUs).
"""

import functools
from collections.abc import Callable
from pathlib import Path

from prime_rl.config.judge import serves_reward_model
from prime_rl.config.modes import uses
from prime_rl.config.rules import check_gpu_count, check_rules
from prime_rl.config.schema import Config
from prime_rl.config.teachers import named_errors, named_views, with_teacher
from prime_rl.launcher.gpus import visible_gpus
from prime_rl.launcher.preflight.gpus import check_cpu_run_on_gpu_node
from prime_rl.launcher.preflight.models import (
    check_judge_model,
    check_models,
    check_teacher_model,
    check_tensor_parallel,
)
from prime_rl.launcher.preflight.tasks import check_answers, check_eval_tasks, check_task
from prime_rl.launcher.preflight.teachers import (
    check_local_alignments,
    check_reward_model_endpoint,
    check_teacher_cache,
    check_teacher_env,
    teacher_alignments,
)
from prime_rl.launcher.preflight.tokenizers import (
    check_prompt_lengths,
    check_teacher_tool_calls,
    student_tokenizer_or_error,
)
from prime_rl.launcher.standing_server import check_standing_server
from prime_rl.monitor.wandb_mode import settle_wandb_mode
from prime_rl.tasks.registry import load_task
from prime_rl.teacher.chat_api import resolve_teacher_api
from prime_rl.teacher.scoring import check_top_k_served, check_top_k_vocab


def check_at_launch(cfg: Config, gpus: int) -> None:
    """Raise ConfigError on the first broken rule or missing resource. `gpus`: the GPUs the job will see."""
    check_rules(cfg, gpus)  # first: they cost nothing, a Hub query or a task build may take seconds
    if cfg.inference.url and not cfg.launcher.dry_run:
        check_standing_server(cfg)
    check_teacher_env(cfg)
    check_teacher_cache(cfg)
    check_models(cfg)
    check_top_k_vocab(cfg)
    for name, view in named_views(cfg):  # the same for each named teacher
        with named_errors(name):
            check_teacher_env(view)
            check_teacher_cache(view)
            check_teacher_model(view)
            check_top_k_vocab(view)
    check_judge_model(cfg)
    check_tensor_parallel(cfg)
    check_task(cfg)
    check_eval_tasks(cfg)
    if uses(cfg, lambda m: m.needs_answers):
        check_answers(cfg, load_task(cfg.task))
    check_local_alignments(cfg)


def check_at_job(cfg: Config, run_dir: Path, warn: Callable[[str], None]) -> Config:
    """The config with the W&B mode and the teacher's API settled on the machine that runs the job, where a SLURM
    node may see other GPUs than asked for and have no route to W&B; raises a UserError."""
    gpus = len(visible_gpus())
    check_gpu_count(cfg, gpus)
    check_cpu_run_on_gpu_node(cfg, gpus)
    cfg = settle_wandb_mode(cfg, run_dir, warn)
    if not cfg.launcher.dry_run:  # a setting the endpoint refuses, a wrong key or model: before anything starts
        cfg = resolve_teacher_api(cfg)
        check_top_k_served(cfg)
        for name, view in named_views(cfg):
            with named_errors(name):
                if serves_reward_model(cfg, name):  # a classifier: no chat to probe
                    check_reward_model_endpoint(view, name)
                else:
                    cfg = with_teacher(cfg, name, resolve_teacher_api(view).teacher)
                check_top_k_served(view)
    return cfg


def check_with_student_tokenizer(cfg: Config) -> tuple[Config, dict[str, str]]:
    """What needs the student's tokenizer and chat template (and a local teacher's config, a Hub model's attention
    heads): at job time, once the models are built, and before any server starts. The tokenizer loads only when a
    check needs it: the prompts' lengths are cached (models/prompt_lengths.py). Returns the config with each opd
    teacher's alignment resolved, and by teacher key what it got and why."""
    tokenizer = functools.cache(lambda: student_tokenizer_or_error(cfg))
    task = load_task(cfg.task)
    check_prompt_lengths(cfg, task, tokenizer)
    check_teacher_tool_calls(cfg, tokenizer)
    cfg, alignments = teacher_alignments(cfg, task, tokenizer)
    check_top_k_vocab(cfg)
    for name, view in named_views(cfg):
        with named_errors(name):
            check_top_k_vocab(view)
    check_tensor_parallel(cfg)
    return cfg, alignments
