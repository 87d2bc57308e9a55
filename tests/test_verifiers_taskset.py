"""task=verifiers: a verifiers (v1) taskset defined here, loaded by verifiers' own loader, scored by its rewards in
the verifier processes; what offline single-turn scoring cannot do is refused in one line."""

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest

from prime_rl.config.schema import TaskConfig, VerificationConfig
from prime_rl.config.user_error import ConfigError
from prime_rl.orchestrator.tool_calls import answer
from prime_rl.tasks import load_task
from prime_rl.tasks.gym_env import demonstrated, make_env, tool_schemas
from prime_rl.tasks.reward_workers import Verification
from tests.conftest import ROOT

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


@pytest.mark.integration
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


@pytest.mark.integration
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


# --- a multi-turn environment (tasks/verifiers_episodes.py): examples/reverse_retry_game.py -------------------------

TWO_SEATS = """
class DuelEnvConfig(vf.EnvConfig):
    first: vf.AgentConfig = vf.AgentConfig()
    second: vf.AgentConfig = vf.AgentConfig()


class DuelEnv(vf.Env[DuelEnvConfig]):
    async def run(self, task, agents):
        pass
"""


@pytest.mark.integration
def test_a_multi_turn_environment_is_played_through_the_gym_api_and_scored_by_its_trace(monkeypatch):
    """The game asks again after a wrong reply; its own reward and the task's (@vf.reward, at the interaction's
    close) make the episode's. A reused environment drops an unfinished episode on reset()."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    task = load_task(TaskConfig(name="verifiers", env="reverse_retry_game", max_turns=3, num_train=16, num_eval=4))
    assert len(task.train) == 16 and len(task.eval) == 4 and all(ex.env is not None for ex in task.train)
    seeds = [ex.env.seed for ex in task.train + task.eval]
    assert sorted(seeds) == list(range(20))  # each episode plays one task of the stream, by its place
    env = make_env(task.train[0].env)
    observation, _ = env.reset(seed=0)
    word = observation.removeprefix("reverse: ")
    assert observation.startswith("reverse: ") and word.isalpha()
    assert env.step("nope") == ("wrong, try again", 0.0, False, False, {})
    _, reward, done, _, _ = env.step(word[::-1])
    assert done and reward == pytest.approx(0.8 * 2 / 3 + 0.2)  # right at the second attempt, and a word of letters
    env.reset(seed=1)
    env.step("x1")  # left unfinished: the next reset() starts over
    observation, _ = env.reset(seed=1)
    assert env.step(observation.removeprefix("reverse: ")[::-1])[1:3] == (pytest.approx(1.0), True)
    assert demonstrated(task.train[0])[0][-1]["role"] == "assistant"  # the task's answer: a warm start's reply


@pytest.mark.integration
def test_a_taskset_with_a_toolset_is_played_as_a_turn_of_tool_calls_scored_with_the_state_they_left(monkeypatch):
    """examples/vault_lookup.py has no Env of its own but a toolset: verifiers' single-agent case, played as an
    episode. Its `get` tool, listed with MCP's schema under its own name, answers from the episode's task (the
    toolset is set up per episode) and counts each call in the trace's state; a reply without a call ends the
    turn, and the task's rewards read the reply and that state. A call the tool refuses is answered, not raised."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    task = load_task(TaskConfig(name="verifiers", env="vault_lookup", max_turns=3, num_train=8, num_eval=2))
    assert all(ex.env is not None for ex in task.train)
    env = make_env(task.train[0].env)
    key = env.reset(seed=0)[0].removeprefix("lookup: ")
    [schema] = tool_schemas(env)
    assert schema["function"]["name"] == "get" and schema["function"]["parameters"]["required"] == ["key"]
    tools = {tool.__name__: tool for tool in env.tools}
    value = asyncio.run(answer(("get", json.dumps({"key": key})), tools, 5))[0]
    assert value.isalpha() and value not in key
    assert asyncio.run(answer(("get", '{"key": "zz"}'), tools, 5)) == ("no key zz", False)
    refused, invalid = asyncio.run(answer(("get", '{"key": 1}'), tools, 5))
    assert invalid and refused.startswith("tool error: Error executing tool get") and "valid string" in refused
    assert env.step(value) == ("", pytest.approx(1.0), True, False, {})  # the value, and a lookup made
    roles = [node.message.role for node in env.player.trace.nodes]
    assert roles == ["user", *["assistant", "tool"] * 3, "assistant"]  # each call and its result, then the reply
    assert env.player.trace.state.lookups == 2  # the refused call never ran

    env.reset(seed=1)  # the next episode: a state of its own, a toolset set up on its own task
    _, reward, done, _, _ = env.step("nope")
    assert done and reward < 0.8 and env.player.trace.state.lookups == 0  # no lookup, no credit for one
    env.reset(seed=1)
    assert {tool.__name__: tool for tool in env.tools}["get"](key=key) == f"no key {key}"


GAME_WITH_A_TOOL = """
import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: str


class Hints(vf.Toolset[vf.ToolsetConfig, vf.State]):
    @vf.tool
    def hint(self) -> str:
        \"\"\"A hint.\"\"\"
        return "add one"


class SumTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class SumTask(vf.Task[SumData, vf.State, SumTaskConfig]):
    @classmethod
    def toolsets(cls, config):
        return [Hints(config.tools)]

    @vf.reward
    async def right(self, trace) -> float:
        return float(trace.last_reply == self.data.answer)


class SumConfig(vf.TasksetConfig):
    task: SumTaskConfig = SumTaskConfig()


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(4):
            yield SumTask(SumData(prompt=f"{i} + 1 = ?", answer=str(i + 1)), self.config.task)


class TwoTriesConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class TwoTries(vf.Env[TwoTriesConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            if segment.last_reply != task.data.answer:
                await interaction.turn("no, again")


__all__ = ["SumTaskset", "TwoTries"]
"""


@pytest.mark.integration
def test_a_game_with_a_toolset_takes_tool_calls_inside_any_of_its_turns(tmp_path, monkeypatch):
    """A game of its own (two tries) whose task has a toolset: the tool, named `<toolset>_<tool>` as verifiers'
    harnesses name it, answers within each turn, and each turn's calls join the trace before its reply."""
    (tmp_path / "sum_game.py").write_text(GAME_WITH_A_TOOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    task = load_task(TaskConfig(name="verifiers", env="sum_game", max_turns=4, num_train=2, num_eval=2))
    env = make_env(task.train[0].env)
    assert env.reset(seed=0)[0] == "0 + 1 = ?"
    [hint] = env.tools
    assert hint.__name__ == "hints_hint" and tool_schemas(env)[0]["function"]["name"] == "hints_hint"
    assert hint() == "add one"
    assert env.step("2") == ("no, again", 0.0, False, False, {})
    assert hint() == "add one"
    assert env.step("1") == ("", 1.0, True, False, {})
    roles = [node.message.role for node in env.player.trace.nodes]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize(
    "tools, needs",
    [
        ({"url": "http://tools:8000/mcp"}, "Vault's remote tool server"),
        ({"runtime": {"type": "docker"}}, "a docker runtime for Vault"),
    ],
)
def test_a_toolset_that_does_not_run_locally_is_one_line(monkeypatch, tools, needs):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    with pytest.raises(ConfigError) as e:
        load_task(TaskConfig(name="verifiers", env="vault_lookup", options={"task": {"tools": tools}}, num_train=4))
    assert e.value.keys == ["task.env"] and needs in str(e.value) and "\n" not in str(e.value)


FIRST_EPISODES = """
import threading
from prime_rl.tasks import verifiers_episodes

together, loops = threading.Barrier(8), []

def reset():  # what each episode's reset() asks first, in a thread of its own
    together.wait()
    loops.append(verifiers_episodes._loop())

threads = [threading.Thread(target=reset) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(set(map(id, loops))))
"""


@pytest.mark.integration
def test_the_episodes_a_fresh_orchestrator_resets_together_share_one_event_loop():
    """A fresh orchestrator's first step resets its episodes together, each in a thread of its own. They must get
    the one event loop of the process: a reply handed to another loop than the one its run() waits on is never
    seen, and that episode's step() times out."""
    run = subprocess.run([sys.executable, "-c", FIRST_EPISODES], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["1"]


UNFINISHED_EPISODE = """
from prime_rl.config.schema import TaskConfig
from prime_rl.tasks.gym_env import make_env
from prime_rl.tasks.registry import load_task

task = load_task(TaskConfig(name="verifiers", env="reverse_retry_game", max_turns=3, num_train=2, num_eval=1))
make_env(task.train[0].env).reset(seed=0)  # its run() now waits for a reply that never comes
print("exiting")
"""


@pytest.mark.integration
def test_an_episode_left_waiting_at_exit_is_cancelled_not_dropped_pending():
    run = subprocess.run(
        [sys.executable, "-c", UNFINISHED_EPISODE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'examples'}"},
    )
    assert run.returncode == 0 and run.stdout.split() == ["exiting"], run.stderr[-2000:]
    assert "Task was destroyed but it is pending" not in run.stderr, run.stderr[-2000:]


def test_a_multi_turn_environment_this_player_cannot_play_is_one_line(tmp_path, monkeypatch):
    write_taskset(tmp_path, monkeypatch, "duel", TWO_SEATS)
    with (tmp_path / "duel.py").open("a") as module:
        module.write('__all__ = ["QuizTaskset", "DuelEnv"]\n')  # the env exported: the taskset is multi-turn
    with pytest.raises(ConfigError) as e:
        load_task(TaskConfig(name="verifiers", env="duel"))
    assert e.value.keys == ["task.env"] and "needs 2 players (first, second)" in str(e.value)
