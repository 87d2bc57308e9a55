"""Tasks: prompts with reference answers and a verifier that turns a completion into a reward in [0, 1].

- `task.py`               Example and Task, the data every kind of task is made of
- `registry.py`           the kinds (`task.name`), each one's loader and scorer; load_task, make_verifier
- `builtin.py`            reverse and sort, generated from a seed
- `hf.py`                 your data through Hugging Face `datasets` (hf, jsonl)
- `reasoning_gym_task.py` reasoning-gym's generators, scored by each dataset's score_answer
- `verifiers_adapter.py`  a `verifiers` (v1) taskset, scored by its own rewards
- `gym_env.py`            multi-turn environments with the Gymnasium text API (played by orchestrator/episodes.py)
- `retry_env.py`          the built-in one: reverse, with a few tries
- `lookup_env.py`         the built-in tool-using one: look a key up with a tool
- `mix.py`                several of these in one run
- `rewards.py`            rewards against a reference answer: similarity, exact, contains, math, yours
- `reward_workers.py`     rewards in worker processes with a time limit (the orchestrator's)
"""

from prime_rl.tasks.registry import TASK_KINDS, load_task
from prime_rl.tasks.task import Example, Task

__all__ = ["TASK_KINDS", "Example", "Task", "load_task"]
