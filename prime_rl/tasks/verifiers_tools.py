"""verifiers' toolsets (`vf.Toolset`: `@vf.tool` methods, which verifiers serves over MCP to a harness program)
served in-process to the episode engine: each toolset registered on an MCP server object of its own, as verifiers
registers it (so the tools' JSON schemas, argument checks and results are MCP's), and called on the episodes' event
loop. A call sees and updates its episode's trace state as through verifiers' state channel: pulled before the
call, written back after it when changed. A task's toolsets (`Task.toolsets`) are made and set up per episode with
the task's data; a taskset's (`Taskset.toolsets`) once per process, shared by every episode. A tool is named as
verifiers' harnesses name it: `<server name>_<tool>`, or the tool's own name under `TOOL_PREFIX = None`."""

import contextvars
import inspect

from prime_rl.tasks.gym_env import EnvProtocolError

_TRACE = contextvars.ContextVar("prime_rl_tool_call_trace")  # the trace of the episode a tool call is made in


class ToolCallFailed(RuntimeError):
    """The tool raised or refused its arguments; the message is MCP's, which the student is shown."""


def toolsets_of(taskset, task) -> list:
    """The taskset's shared toolsets and the task's own, as verifiers builds them from their configs."""
    return [*type(taskset).toolsets(taskset.config), *type(task).toolsets(task.config)]


def unservable(toolsets: list) -> list[str]:
    """What of these toolsets serving them in-process does not provide: a remote server, a container runtime, MCP
    handlers of a toolset's own (its tools are not `@vf.tool` methods)."""
    from verifiers.v1 import Toolset

    needs = []
    for toolset in toolsets:
        name, runtime = type(toolset).__name__, toolset.config.runtime.type
        if toolset.config.url:
            needs.append(f"{name}'s remote tool server")
        elif runtime != "subprocess":
            needs.append(f"a {runtime} runtime for {name}")
        elif type(toolset).register is not Toolset.register:
            needs.append(f"{name}'s own MCP handlers")
    return needs


class ToolServers:
    """Toolsets served in-process: `schemas` (OpenAI format, as verifiers' harnesses list them) and `call()`."""

    def __init__(self, toolsets: list, shared: "ToolServers | None" = None):
        self.toolsets = toolsets  # the ones this object set up and closes
        self.schemas: list[dict] = list(shared.schemas) if shared else []
        self.tools: dict[str, tuple] = dict(shared.tools) if shared else {}  # name: (MCP server, its name, signature)

    async def start(self, data=None) -> "ToolServers":
        """Each toolset set up (with the task's data, for a task's own) and registered; none left open if one
        fails."""
        try:
            for toolset in self.toolsets:
                await self._serve(toolset, data)
        except Exception:
            await self.close()
            raise
        return self

    async def _serve(self, toolset, data) -> None:
        from mcp.server.mcpserver import MCPServer
        from verifiers.v1.utils.decorators import discover_decorated

        await toolset.setup()
        if data is not None:
            await toolset.setup_task(data)
        serve_state(toolset)
        mcp = MCPServer(toolset.server_name or type(toolset).__name__)
        toolset.register(mcp)
        methods = {getattr(fn, "tool_name", None) or fn.__name__: fn for fn in discover_decorated(toolset, "tool")}
        for tool in await mcp.list_tools():
            name = f"{toolset.server_name}_{tool.name}" if toolset.server_name else tool.name
            if name in self.tools:
                raise EnvProtocolError(f"two tools are named {name!r}: give one toolset a TOOL_PREFIX")
            function = {"name": name, "description": tool.description or "", "parameters": tool.input_schema}
            self.schemas.append({"type": "function", "function": function})
            self.tools[name] = (mcp, tool.name, inspect.signature(methods[tool.name]))

    async def call(self, trace, name: str, arguments: dict) -> str:
        """The tool's result as text; ToolCallFailed when it raised or its arguments do not fit."""
        from mcp.server.mcpserver.exceptions import ToolError

        mcp, tool, _ = self.tools[name]
        _TRACE.set(trace)  # this call's own task: concurrent episodes' calls do not see it
        try:
            result = await mcp.call_tool(tool, arguments)
        except ToolError as e:
            raise ToolCallFailed(str(e)) from e
        text = "\n".join(block.text for block in result.content if block.type == "text")
        if result.is_error:
            raise ToolCallFailed(text)
        return text

    async def close(self) -> None:
        """The episode is over: what the toolsets pushed on their exit stacks is undone, as when verifiers stops
        their servers."""
        for toolset in self.toolsets:
            await toolset._exit_stack.aclose()


def serve_state(toolset) -> None:
    """verifiers' state channel in-process: the toolset's `_with_state` pulls the calling episode's trace state
    (validated into the toolset's State type) before each call and pushes it after (validated into the trace's),
    as verifiers' interception server does over HTTP. A toolset of the base State syncs none."""
    from pydantic import TypeAdapter
    from verifiers.v1.state import state_cls

    adapter = TypeAdapter(state_cls(type(toolset)))

    async def pull():
        return adapter.validate_json(_TRACE.get().state.model_dump_json())

    async def push(before: bytes) -> None:
        after = adapter.dump_json(toolset.state)
        if after != before:
            trace = _TRACE.get()
            trace.state = type(trace.state).model_validate_json(after)

    toolset._pull_state, toolset._push_state = pull, push
