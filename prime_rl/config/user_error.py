"""Mistakes a user can fix (a config, data, a verifier, an endpoint, a model): one line, no traceback."""

import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from enum import Enum


class UserError(Exception):
    """Its message says what is wrong and how to fix it, on one line; `keys`: the config keys it names, if any."""

    def __init__(self, message: str, keys: Sequence[str] = ()):
        super().__init__(message)
        self.keys = list(keys)


class ConfigError(UserError, ValueError):
    """A run that cannot go as configured: the keys that say so, what is wrong, and the fix."""

    def __init__(self, keys: Sequence[str], problem: str, fix: str):
        super().__init__(f"invalid config [{', '.join(keys)}]: {problem}; fix: {fix}", keys)
        self.problem, self.fix = problem, fix


@contextmanager
def keys_renamed(prefix: str, to: str):
    """A check run on a view of the config: its error names `to…` where it said `prefix…`."""
    try:
        yield
    except ConfigError as e:
        keys = [to + k.removeprefix(prefix) if k.startswith(prefix) else k for k in e.keys]
        raise ConfigError(keys, e.problem.replace(prefix, to), e.fix.replace(prefix, to)) from e


def check(ok: bool, keys: Sequence[str], problem: str, fix: str) -> None:
    if not ok:
        raise ConfigError(keys, problem, fix)


def first_line(e: Exception) -> str:
    """An exception's first line, for a one-line error (a library's message may run over many)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def exit_with(message: str) -> None:
    """The one way a process ends on a user's mistake: one `error:` line on stderr, exit code 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def run_or_exit(main: Callable[[], None]) -> None:
    """`main()`; a UserError ends the process with its one line (exit_with)."""
    try:
        main()
    except UserError as e:
        exit_with(str(e))


def literal(value) -> str:
    """A value as YAML or the command line writes it (a message's fix is typed back there)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, list):
        return "[" + ", ".join(map(literal, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {literal(v)}" for k, v in value.items()) + "}"
    return str(value).replace("\n", "\\n") if value != "" else '""'
