"""A verifiers (v1) multi-turn environment played as a Gymnasium text environment (tasks/gym_env.py), so the
orchestrator's episode engine plays it like any other: `task=verifiers task.env=<taskset id>` whose taskset
exports its own `verifiers.v1.Env` (TextArena's games, a game of your own; examples/reverse_retry_game.py).

verifiers drives an episode from the environment's side: `Env.run(task, agents)` asks the player for each reply
(`async with agents.player.interaction(task) as i: segment = await i.turn(message)`) and records rewards on
`i.trace`. Here the player is the student (or the teacher) as the engine samples it: `run()` plays on one
background event loop; `reset()` starts it and returns the prompt it opens with, each `step(reply)` hands the
reply to the waiting `turn()` and returns the next message it sends, until `run()` ends. The task's own rewards
(`@vf.reward`) score the trace when the interaction closes, as in verifiers; the episode's reward is the trace's.
A taskset without an Env of its own but with toolsets is verifiers' single-agent case (`agents.agent.run(task)`):
one turn on the task's prompt, in which the student calls the tools (tasks/verifiers_tools.py) until it replies
without a call. Each call and its result join the trace before the reply, as a harness's would. One seat, no
harness program: an environment that needs more is refused by name when the task is built.
"""

import asyncio
import atexit
import contextlib
import functools
import itertools
import json
import queue
import threading

from prime_rl.tasks.gym_env import EnvProtocolError
from prime_rl.tasks.verifiers_tools import ToolServers

END, TURN, ERROR = "end", "turn", "error"  # what run() did while the engine waited


def multi_turn_env(taskset_id: str) -> type | None:
    """The taskset's own Env class (verifiers' `environment_class`), None where it has none (single-agent)."""
    from verifiers.v1.envs.single_agent import SingleAgentEnv
    from verifiers.v1.utils.loaders import environment_class

    cls = environment_class(taskset_id)
    return None if issubclass(cls, SingleAgentEnv) else cls


def seats(taskset_id: str) -> list[str]:
    """The agents (roles) the environment's config declares: a game this player can play has one."""
    from verifiers.v1.configs.agent import agent_config_fields
    from verifiers.v1.utils.loaders import env_config_type

    return list(agent_config_fields(env_config_type(taskset_id).model_construct()))


class VerifiersEpisode:
    """The Gymnasium text API over one verifiers environment: `reset(seed)` plays the seed-th task of the taskset
    (tasks are a stream, each index one task), `step(reply)` answers its pending turn."""

    def __init__(self, taskset: str, options: dict | None = None):
        self.env, self.tasks, self.shared_tools = environment(taskset, options or {})
        self.servers = self.shared_tools  # a reset() adds the task's own toolsets
        self.play: asyncio.Future | None = None

    def reset(self, seed: int) -> tuple[str, dict]:
        self._abandon()
        task = self.tasks(seed)
        own = ToolServers(type(task).toolsets(task.config), self.shared_tools)
        self.servers = _on_loop(own.start(task.data))
        self.player = Player(task)
        self.play = asyncio.run_coroutine_threadsafe(self._run(task, self.player, self.servers), _loop())
        return self._next("reset")[0], {}

    @property
    def tools(self) -> list:
        """The episode's tools as the engine calls them: blocking, by keyword, under their full names."""
        return [self._tool(name, signature) for name, (_, _, signature) in self.servers.tools.items()]

    @property
    def tool_schemas(self) -> list[dict]:
        return self.servers.schemas

    def _tool(self, name: str, signature):
        def call(**arguments):
            return _on_loop(self.player.call_tool(self.servers, name, arguments))

        call.__name__, call.__signature__ = name, signature
        return call

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        self.player.answer(action)
        observation, reward, ended = self._next("step")
        return observation, reward, ended, False, {}

    async def _run(self, task, player: "Player", servers: ToolServers) -> None:
        """The episode, played; what it did last goes to its player's events (an abandoned one's to nobody)."""
        from verifiers.v1.episode import EnvInfo, Episode

        try:
            await self.env.setup(player.agents)
            await self.env.run(task, player.agents)
            trace = await player.close()
            episode = Episode(env=EnvInfo(id=self.env.config.env_id), task=trace.task, traces=[trace])
            await self.env.finalize(task, episode)
            player.events.put((END, trace.reward))
        except Exception as e:  # the engine counts it (env/errors) and shows its first traceback
            player.events.put((ERROR, e))
        finally:
            await servers.close()

    def _next(self, call: str) -> tuple[str, float, bool]:
        """What run() did next: asked for a reply after a message (str), or ended (the trace's reward)."""
        kind, value = self.player.events.get()  # the engine's thread waits here; its time limit is task.env_timeout_s
        if kind == ERROR:
            raise value
        if kind == END:
            if call == "reset":
                raise EnvProtocolError("the environment's run() ended before asking for a reply")
            return "", float(value), True
        return value, 0.0, False

    def demonstration(self) -> list[dict]:
        """A perfect player's turns after reset(), for a built-in model's warm start: the task's `answer` as the
        first reply (most tasksets' data carry one)."""
        answer = getattr(self.player.task.data, "answer", None)
        self._abandon()  # the demonstration is the episode: its run() waits for no reply
        if answer is None:
            raise EnvProtocolError(
                f"{type(self.player.task).__name__}'s data has no answer to warm-start a built-in model on; "
                "set model.warm_start.task=reverse (a built-in task to learn first) or model.warm_start.steps=0"
            )
        return [{"role": "assistant", "content": str(answer)}]

    def _abandon(self) -> None:
        """A reused environment's unfinished episode (the engine ended it at max_turns): stop its run()."""
        if self.play is not None and not self.play.done():
            self.play.cancel()


class Player:
    """verifiers' `agents.<seat>` for the one seat: `interaction(task)` opens the exchange the engine plays, turn by
    turn, on the trace that verifiers' rewards read."""

    def __init__(self, task):
        self.task = task
        self.events: queue.Queue = queue.Queue()  # what run() did, for the engine's thread: END, TURN or ERROR
        self.trace = new_trace(task)
        self.replies: asyncio.Queue = asyncio.Queue()
        self.prompted = task.data.prompt is not None
        self.agents = Seats(self)
        self.closed = False
        self.calls: list = []  # the tool calls of the turn being played and their results, as messages
        self.call_ids = itertools.count()

    async def call_tool(self, servers: ToolServers, name: str, arguments: dict) -> str:
        """One of the student's tool calls, run; it and its result are recorded for the trace."""
        from verifiers.v1.types import AssistantMessage, ToolCall, ToolMessage

        call = ToolCall(id=f"call_{next(self.call_ids)}", name=name, arguments=json.dumps(arguments))
        try:
            result = await servers.call(self.trace, name, arguments)
        except Exception as e:
            result = f"tool error: {e}"
            raise
        finally:
            self.calls += [AssistantMessage(tool_calls=[call]), ToolMessage(tool_call_id=call.id, content=result)]
        return result

    def answer(self, text: str) -> None:
        _loop().call_soon_threadsafe(self.replies.put_nowait, text)

    @contextlib.asynccontextmanager
    async def interaction(self, task):
        try:
            yield self
        finally:
            await self.close()

    async def turn(self, message=None):
        """Send `message` (none: the task's prompt opens the exchange) and wait for the player's reply."""
        from verifiers.v1.agent import Segment
        from verifiers.v1.types import AssistantMessage

        if message is None and not self.prompted:
            raise ValueError("a bare turn() takes a prompted task's opening reply")
        new = [] if message is None else user_messages(message)
        self.events.put((TURN, prompt_text(self.task) if message is None else "\n".join(message_text(m) for m in new)))
        self.prompted = False
        reply = AssistantMessage(content=await self.replies.get())
        add_nodes(self.trace, [*new, *self.calls, reply])
        self.calls = []
        return Segment(messages=[reply])

    async def run(self, task, **_):
        """verifiers' single-agent case: one turn on the task's prompt (the tools answer the calls in it)."""
        async with self.interaction(task) as interaction:
            await interaction.turn()
        return self.trace

    async def close(self):
        """The exchange is over: the task's rewards score the trace, once."""
        if not self.closed:
            self.closed = True
            self.trace.is_completed = True
            await self.task.score(self.trace)
        return self.trace


class Seats:
    """`agents`: the player under whatever name the environment's one seat has."""

    def __init__(self, player: Player):
        self._player = player

    def __getattr__(self, name: str) -> Player:
        return self._player


def new_trace(task):
    """An open trace of the task: its prompt (system, user), then the turns as they are played."""
    from verifiers.v1.types import SystemMessage

    trace = empty_trace(task)
    system = [SystemMessage(content=task.data.system_prompt)] if task.data.system_prompt else []
    prompt = [] if task.data.prompt is None else user_messages(task.data.prompt)
    add_nodes(trace, [*system, *prompt])
    return trace


def empty_trace(task):
    from verifiers.v1 import AgentConfig, AgentInfo
    from verifiers.v1.state import state_cls
    from verifiers.v1.trace import Trace, TraceTask

    meta = TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash)
    agent = AgentInfo(config=AgentConfig(), name="prime-rl")
    return Trace(task=meta, agent=agent, nodes=[], state=state_cls(type(task))(), ok=True)


def add_nodes(trace, messages: list) -> None:
    from verifiers.v1 import MessageNode
    from verifiers.v1.types import AssistantMessage

    for message in messages:
        parent = len(trace.nodes) - 1 if trace.nodes else None
        trace.nodes.append(MessageNode(parent=parent, message=message, sampled=isinstance(message, AssistantMessage)))


def user_messages(message) -> list:
    """A turn's message as verifiers types it: a string is one user message; a list, messages (or their dicts)."""
    from verifiers.v1.dialects import parse_message
    from verifiers.v1.types import UserMessage

    if isinstance(message, str):
        return [UserMessage(content=message)]
    return [parse_message(m) if isinstance(m, dict) else m for m in message]


def prompt_text(task) -> str:
    """The user turns of the task's prompt as the episode's first observation (its system prompt is the
    example's, tasks/verifiers_adapter.py)."""
    return "\n".join(message_text(m) for m in user_messages(task.data.prompt) if m.role == "user")


def message_text(message) -> str:
    from verifiers.v1.types import content_text

    return content_text(message.content)


_STARTING = threading.Lock()  # the first episodes of a step reset together, each in a thread of its own


def _loop() -> asyncio.AbstractEventLoop:
    """The event loop every verifiers episode of this process runs on, in a daemon thread of its own: one, as an
    episode's replies go to the loop its run() waits on."""
    with _STARTING:
        return _started_loop()


def _on_loop(coroutine):
    """The coroutine's result, run on the episodes' loop (from any other thread)."""
    return asyncio.run_coroutine_threadsafe(coroutine, _loop()).result()


@functools.cache
def _started_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True, name="verifiers-episodes").start()
    atexit.register(_end_episodes, loop)
    return loop


def _end_episodes(loop: asyncio.AbstractEventLoop) -> None:
    """At exit, the episodes still waiting for a reply (the run ended, or its engine abandoned them) are cancelled
    on their loop, which closes their toolsets, rather than dropped pending with the interpreter (asyncio would
    warn for each)."""

    async def cancel_all():
        episodes = asyncio.all_tasks() - {asyncio.current_task()}
        for episode in episodes:
            episode.cancel()
        await asyncio.gather(*episodes, return_exceptions=True)

    with contextlib.suppress(Exception):  # a toolset slow to close does not hold the exit past the bound
        asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=5)


_LOADING = threading.Lock()  # likewise for the taskset, loaded once


def environment(taskset_id: str, options: dict):
    """The environment (its taskset loaded once per process), its tasks by index, read as far as asked, and the
    taskset's shared toolsets, set up. Loaded when the task is (tasks/verifiers_adapter.py), so no episode's reset()
    waits for it within its time limit."""
    with _LOADING:
        return _environment(taskset_id, json.dumps(options, sort_keys=True))


@functools.cache
def _environment(taskset_id: str, options: str):
    from verifiers.v1.utils.loaders import load_environment, resolve_env_config

    env = load_environment(resolve_env_config({"taskset": {"id": taskset_id, **json.loads(options)}}))
    shared = _on_loop(ToolServers(type(env.taskset).toolsets(env.taskset.config)).start())
    stream, seen, lock = iter(env.taskset), [], threading.Lock()

    def task(index: int):
        with lock:
            seen.extend(itertools.islice(stream, max(0, index + 1 - len(seen))))
            if index >= len(seen):
                raise EnvProtocolError(f"taskset {taskset_id!r} has {len(seen)} tasks, not {index + 1}")
            return seen[index]

    return env, task, shared
