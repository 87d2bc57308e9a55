"""Tasks: prompts with reference answers and a verifier that turns a completion into a reward in [0, 1] (the modules:
docs/architecture.md, "Packages and who may import whom")."""

from prime_rl.tasks.registry import TASK_KINDS, load_task
from prime_rl.tasks.task import Example, Task

__all__ = ["TASK_KINDS", "Example", "Task", "load_task"]
