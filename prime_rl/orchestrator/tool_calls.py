"""Tool calls in episodes (task=gym, an environment with `tools`). Rollouts are token-id /v1/completions, where
vLLM's server-side tool parsing does not run, so the orchestrator reads a reply's calls with vLLM's own parser
for the model's format (task.tool_parser). Each call runs in a thread with the environment's time limit and is
answered by a `tool` message. A call that cannot be read, names no tool, or passes arguments the tool does not
take is answered `invalid tool call: …`, and a tool that raises `tool error: …`: the student's mistakes, which it
can learn from, not the environment's failures (a tool that overruns its limit is one: the episode times out). A
result that is not a string is sent as JSON."""

import inspect
import json
import logging
from collections.abc import Callable

from prime_rl.orchestrator.env_pool import call_in_thread
from prime_rl.tasks.gym_env import tool_parser_class

Call = tuple[str, str]  # (tool name, its arguments as JSON text)


def tool_reader(readers: dict[str, "ToolReader"], name: str, tokenizer) -> "ToolReader":
    """The run's reader for parser `name`, made at its first use (it imports vLLM's parsers: seconds)."""
    if name not in readers:
        readers[name] = ToolReader(name, tokenizer)
    return readers[name]


class ToolReader:
    """The calls in a reply's text, read by vLLM's tool parser `name`."""

    def __init__(self, name: str, tokenizer):
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        cls = tool_parser_class(name)
        self.parser = cls(tokenizer)
        self.request = ChatCompletionRequest(model="student", messages=[])
        # a reply that does not parse is the student's mistake, answered in the episode, not a traceback in the log
        logging.getLogger(cls.__module__).disabled = True

    def calls(self, text: str) -> list[Call] | None:
        """The reply's calls; [] for a reply that opens a call none of which can be read; None for no call."""
        found = self.parser.extract_tool_calls(text, self.request)
        if found.tools_called:
            return [(c.function.name, c.function.arguments) for c in found.tool_calls]
        opening = getattr(self.parser, "tool_call_start_token", None)  # the parsers with a tag have its text here
        return [] if opening and opening in text else None


async def answer(call: Call, tools: dict[str, Callable], timeout_s: float) -> tuple[str, bool]:
    """The tool message's content for one call, and whether the call was invalid."""
    name, arguments = call
    if name not in tools:
        return f"invalid tool call: no tool {name!r} (tools: {', '.join(tools)})", True
    try:
        kwargs = json.loads(arguments)
        inspect.signature(tools[name]).bind(**kwargs)
    except (ValueError, TypeError) as e:  # not JSON, not an object, or not the tool's parameters
        return f"invalid tool call: {e}", True
    try:
        result = await call_in_thread(lambda: tools[name](**kwargs), timeout_s)
    except TimeoutError:  # a tool that hangs is the environment's failure: the episode times out
        raise
    except Exception as e:
        return f"tool error: {e}", True
    return result if isinstance(result, str) else json.dumps(result, default=str), False


UNREADABLE = ("invalid tool call: it could not be read", True)  # the answer to a call none of which parses
