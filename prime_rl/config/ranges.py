"""Every knob's own range, checked in one pass: the bounds live on the fields in schema.py (`max_steps: Count`,
`top_p: Share`), and pydantic validates the whole typed config against them, named teachers and mix sources
included. A value out of range would otherwise fail deep in a process, mid-run; the first one is one line."""

import dataclasses
import functools

from omegaconf import OmegaConf
from pydantic import TypeAdapter, ValidationError

from prime_rl.config.schema import Config
from prime_rl.config.user_error import ConfigError

# pydantic's constraint names, as the message writes them
BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


@functools.cache
def config_adapter() -> TypeAdapter:
    """Built once: the schema's validator (a sweep validates every point)."""
    return TypeAdapter(Config)


def check_ranges(cfg: Config) -> None:
    """Raise ConfigError on the first field (in schema order) whose value is outside its bounds."""
    try:
        config_adapter().validate_python(dataclasses.asdict(cfg))
    except ValidationError as e:
        error = e.errors()[0]
        key = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
        op, limit = next((BOUNDS[name], value) for name, value in error["ctx"].items() if name in BOUNDS)
        default = OmegaConf.select(OmegaConf.structured(Config), key, default=None)
        example = "" if default is None else f", e.g. its default {default}"
        problem, fix = f"must be {op} {limit}, got {error['input']}", f"give it a value {op} {limit}{example}"
        raise ConfigError([key], problem, fix) from None
