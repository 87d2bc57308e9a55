"""task=verifiers: a verifiers (v1) taskset defined here, loaded by verifiers' own loader, scored by its rewards in
the verifier processes; what offline single-turn scoring cannot do is refused in one line."""

import asyncio
import textwrap

import pytest

from prime_rl.config.schema import TaskConfig, VerificationConfig
from prime_rl.config.user_error import ConfigError
from prime_rl.tasks import load_task
from prime_rl.tasks.reward_workers import Verification

TASKSET = """
import verifiers.v1 as vf


class QuizData(vf.TaskData):
    answer: str


class QuizTask(vf.Task[QuizData]):
    @vf.reward(weight=0.75)
    async def right(self, trace: vf.Trace) -> float:
        if trace.last_reply == "boom":
            raise RuntimeError("the reward broke")
        return float(trace.last_reply == self.data.answer)

    @vf.reward(weight=0.25)
    async def polite(self, trace: vf.Trace) -> float:
        return float(trace.messages[0].role == "system" and "please" in trace.last_reply)


class QuizConfig(vf.TasksetConfig):
    num_tasks: int = 10


class QuizTaskset(vf.Taskset[QuizTask, QuizConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            prompt = [vf.SystemMessage(content="Be brief."), vf.UserMessage(content=f"{{i}} + 1 = ?")]
            yield QuizTask(QuizData(prompt=prompt, answer=str(i + 1)), self.config.task)
{extra}

__all__ = ["QuizTaskset"]
"""

NEEDS_RUNTIME = """
class RuntimeTask(QuizTask):
    @vf.reward
    async def right(self, trace: vf.Trace, runtime) -> float:
        return 1.0

    @vf.reward
    async def polite(self, trace: vf.Trace, runtime) -> float:
        return 1.0
"""


def write_taskset(tmp_path, monkeypatch, name: str, extra: str = "") -> str:
    (tmp_path / f"{name}.py").write_text(TASKSET.format(extra=textwrap.dedent(extra)))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_taskset_gives_prompts_answers_and_its_weighted_rewards(tmp_path, monkeypatch):
    env = write_taskset(tmp_path, monkeypatch, "quiz")
    task = load_task(TaskConfig(name="verifiers", env=env, options={"num_tasks": 30}, num_train=20, num_eval=6))
    assert (len(task.train), len(task.eval)) == (20, 6) and task.name == "verifiers/quiz"
    assert not {ex.prompt for ex in task.train} & {ex.prompt for ex in task.eval}
    ex = task.eval[0]
    assert ex.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ex.prompt}]
    assert ex.answer == str(int(ex.prompt.split()[0]) + 1)
    assert task.reward(ex.answer, ex) == 0.75
    assert task.reward("please", ex) == 0.25
    assert task.reward("wrong", ex) == 0.0
    small = load_task(TaskConfig(name="verifiers", env=env, num_train=20, num_eval=6, system_prompt="Think."))
    assert len(small.train) + len(small.eval) == 10  # the taskset's own num_tasks, when options leave it
    assert small.eval[0].messages[0] == {"role": "system", "content": "Think."}  # task.system_prompt wins


def test_taskset_rewards_run_in_the_verifier_processes_and_errors_count(tmp_path, monkeypatch):
    env = write_taskset(tmp_path, monkeypatch, "quiz_pool")
    cfg = TaskConfig(name="verifiers", env=env, num_eval=4)
    ex = load_task(cfg).eval[0]
    verification = Verification(cfg, VerificationConfig(workers=2, timeout_s=20))
    try:
        rewards = asyncio.run(verification.rewards([(ex.answer, ex), ("boom", ex), ("please " + ex.answer, ex)]))
    finally:
        verification.close()
    assert rewards == [0.75, 0.0, 0.25]
    assert verification.metrics() == {"verifier/calls": 3, "verifier/errors": 1, "verifier/timeouts": 0}


@pytest.mark.parametrize(
    "env, extra, options, keys, words",
    [
        ("no_such_taskset", "", {}, ["task.env"], "cannot load taskset 'no_such_taskset'"),
        ("quiz_opts", "", {"num_taskz": 3}, ["task.options"], "num_taskz: Extra inputs are not permitted"),
        ("quiz_runtime", NEEDS_RUNTIME, {}, ["task.env"], "a runtime for every reward"),
    ],
)
def test_taskset_mistakes_are_one_line(tmp_path, monkeypatch, env, extra, options, keys, words):
    if env != "no_such_taskset":
        write_taskset(tmp_path, monkeypatch, env, extra)
    if extra:  # the taskset yields the task whose only reward needs a sandbox
        text = (tmp_path / f"{env}.py").read_text().replace("yield QuizTask(", "yield RuntimeTask(")
        (tmp_path / f"{env}.py").write_text(text)
    with pytest.raises(ConfigError) as e:
        load_task(TaskConfig(name="verifiers", env=env, options=options))
    assert e.value.keys == keys and words in str(e.value) and "\n" not in str(e.value)
