"""Tasks: prompts with reference answers and a verifier that turns a completion into a reward in [0, 1]."""

from prime_rl.tasks.builtin import BUILTIN_TASKS
from prime_rl.tasks.task import Example, Task, load_task
from prime_rl.tasks.verifiers import TaskError

__all__ = ["BUILTIN_TASKS", "Example", "Task", "TaskError", "load_task"]
