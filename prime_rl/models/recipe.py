"""Where a model lives: a user's model dir as given, a Hub id's snapshot (hub.py), or the cache dir of a built-in
tiny model's recipe.

A tiny model is fully determined by its recipe (architecture, warm-start SFT, task), so the recipe's hash
names its cache dir: a changed knob builds a new model, an unchanged one reuses the cached build.
"""

import hashlib
import json
import os
from dataclasses import asdict, replace
from pathlib import Path

from prime_rl.config.schema import Config, TaskConfig, TinyModelConfig, WarmStartConfig
from prime_rl.models.hub import is_hub_id

# bump when the builder changes what a recipe produces (3: templates list tools; 4: they render OpenAI tool_calls;
# 5: the record names the class AutoTokenizer loads its tokenizer with)
RECIPE_VERSION = 5
RECIPE_FILE = "recipe.json"  # a built model's record: its recipe, build time, greedy eval, tokenizer class


def cache_root(cache_dir: str | None) -> Path:
    return Path(cache_dir or os.environ.get("PRIME_RL_CACHE") or "~/.cache/prime_rl").expanduser()


# what a source says about training on it (how it is scored, by which mode), not about its data: a warm start
# never reads it
TRAINING_ONLY = ("mode", "adv_tau", "teacher_tau", "rollouts_per_example", "verifier", "on_policy")


def recipe(tiny: TinyModelConfig, warm_start: WarmStartConfig, task: TaskConfig) -> dict:
    return {"version": RECIPE_VERSION, "tiny": asdict(tiny), "warm_start": asdict(warm_start), "task": data_of(task)}


def data_of(task: TaskConfig) -> dict:
    """The task as a warm start learns it: every source's data fields, without how the run trains on them."""
    fields = {k: v for k, v in asdict(task).items() if k not in TRAINING_ONLY}
    fields["mix"] = [{k: v for k, v in src.items() if k not in TRAINING_ONLY} for src in fields["mix"]]
    return fields


def trained_on(warm_start: WarmStartConfig, task: TaskConfig) -> tuple[WarmStartConfig, TaskConfig]:
    """What a tiny model's warm start learns: the run's task, or the built-in task `warm_start.task` names, whose
    recipe is then that task's own (a task=retry run shares the build of a task=reverse run)."""
    if warm_start.task is None:
        return warm_start, task
    return replace(warm_start, task=None), warm_start_task(warm_start.task)


WARM_START_ENVS = ("lookup",)  # built-in environments a warm start can learn first, beside the built-in tasks


def warm_start_task(name: str) -> TaskConfig:
    """The built-in task of that name as its conf/task preset sets its data (lookup: a gym environment whose
    demonstrations call its tool), so a warm start on it shares the build of a run on it."""
    if name == "lookup":
        return TaskConfig(name="gym", env="prime_rl.tasks.lookup_env:Lookup", max_turns=3)
    return TaskConfig(name=name)


def model_dir(name: str, tiny: TinyModelConfig, warm_start: WarmStartConfig, task: TaskConfig, cache_dir) -> Path:
    """A tiny model's cache dir, a user's model dir; a Hub id as given (a dry run shows it before it is fetched)."""
    if is_hub_id(name):
        return Path(name)
    if name != "tiny":
        return Path(name).expanduser().resolve()
    warm_start, task = trained_on(warm_start, task)
    key = hashlib.sha256(json.dumps(recipe(tiny, warm_start, task), sort_keys=True).encode()).hexdigest()[:16]
    return cache_root(cache_dir) / "models" / f"tiny-{task.name}-{warm_start.steps}-{key}"


def student_dir(cfg: Config) -> Path:
    m = cfg.model
    return Path(m.path) if m.path else model_dir(m.name, m.tiny, m.warm_start, cfg.task, m.cache_dir)


def teacher_dir(cfg: Config) -> Path:
    """The local teacher's dir; the tiny teacher is the student's architecture trained longer."""
    t = cfg.teacher
    return Path(t.path) if t.path else model_dir(t.model, cfg.model.tiny, t.warm_start, cfg.task, cfg.model.cache_dir)
