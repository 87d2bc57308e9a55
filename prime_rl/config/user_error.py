"""Mistakes a user can fix (a config, data, a verifier, an endpoint, a model): one line, no traceback."""

import sys
from collections.abc import Callable


class UserError(Exception):
    """Its message says what is wrong and how to fix it, on one line."""


def run_or_exit(main: Callable[[], None]) -> None:
    """`main()`; a UserError ends the process with its one line on stderr and exit code 2."""
    try:
        main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
