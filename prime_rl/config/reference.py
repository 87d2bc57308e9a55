"""The parameter reference, rendered from the one-line comment each field has in schema.py, and the table of
training modes, rendered from their `Mode` objects.

That comment is the only description of a key: a table written beside it restates it by hand and drifts
(the README's did). So docs/parameters.md (every key) and the table of the keys most runs touch in
docs/reference/config.md (between two markers) are rendered from those comments and from the defaults Hydra
composes, once per training mode since a mode's group changes some of them; the table of modes in docs/modes.md
(between its markers) from MODES. `python -m prime_rl.config.reference` rewrites the three files; `--check` only
compares, and tests/test_docs.py fails when any of them is stale.
"""

import argparse
import ast
import dataclasses
import functools
import inspect
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from prime_rl.config import modes, schema
from prime_rl.config.modes import MODES, Mode, RolloutSource, Scorer
from prime_rl.config.schema import Config
from prime_rl.config.store import compose_config
from prime_rl.config.user_error import literal

ROOT = Path(__file__).resolve().parents[2]
COMMON = ROOT / "docs" / "reference" / "config.md"  # the knobs most runs touch, beside the config groups
PARAMETERS = ROOT / "docs" / "parameters.md"
COMMAND = "python -m prime_rl.config.reference"
BEGIN = f"<!-- parameters: generated from prime_rl/config/schema.py by `{COMMAND}`, do not edit -->"
END = "<!-- /parameters -->"
MODES_DOC = ROOT / "docs" / "modes.md"  # its table of the built-in modes
MODES_BEGIN = f"<!-- modes: generated from prime_rl/config/modes.py by `{COMMAND}`, do not edit -->"
MODES_END = "<!-- /modes -->"
ROLLOUTS = {RolloutSource.student: "the student", RolloutSource.teacher: "a teacher (any OpenAI-compatible endpoint)"}
SCORERS = {
    Scorer.none: "nobody",
    Scorer.teacher: "a teacher's vLLM server (`teacher=local_vllm\\|external`)",
    Scorer.self: "the student's own server, shown the example's reference answer",
}
MODE_KEY = "training_mode"  # the mode itself: noting that `training_mode=opd` sets it to opd says nothing
MODE_SET = (MODE_KEY, "modes")  # what a mode's group sets by definition (modes.<name>: its own section below)
COMMON_KEYS = (
    "training_mode",
    "max_steps",
    "step_timeout_s",
    "orchestrator.batch_size",
    "orchestrator.rollouts_per_example",
    "orchestrator.max_async_level",
    "orchestrator.verification.enabled",
    "trainer.loss.adv_tau",
    "trainer.loss.teacher_tau",
    "trainer.loss.kl_tau",
    "trainer.loss.correction.prob_band",
    "trainer.loss.correction.mask_low",
    "trainer.loss.correction.mask_high",
    "trainer.loss.correction.truncate_at",
    "trainer.optim.lr",
    "teacher.model",
    "teacher.base_url",
    "teacher.api_key_env",
    "deployment.num_teacher_gpus",
    "deployment.num_infer_nodes",
    "deployment.num_train_nodes",
    "ckpt.interval",
    "ckpt.resume",
    "launcher.dry_run",
)


def field_comments(source: str) -> dict[tuple[str, str], str]:
    """(class name, field name) -> the comment after the field's statement, for every annotated class attribute."""
    lines = source.splitlines()
    return {
        (cls.name, stmt.target.id): trailing_comment(lines[stmt.end_lineno - 1], stmt.end_col_offset)
        for cls in ast.parse(source).body
        if isinstance(cls, ast.ClassDef)
        for stmt in cls.body
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
    }


def trailing_comment(line: str, end_col: int) -> str:
    # ast columns count UTF-8 bytes; slicing after the statement skips a "#" inside a string default
    rest = line.encode()[end_col:].decode().strip()
    return rest[1:].strip() if rest.startswith("#") else ""


def uncommented(module: ModuleType) -> list[str]:
    """`Class.field` of every dataclass field in the module without a trailing comment."""
    comments = field_comments(inspect.getsource(module))
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    return [
        f"{c.__name__}.{f.name}"
        for c in classes
        if dataclasses.is_dataclass(c)
        for f in dataclasses.fields(c)
        if not comments.get((owner(c, f.name), f.name))
    ]


def owner(cls: type, name: str) -> str:
    """The class whose body declares the field: a subclass (TaskConfig) inherits its base's comments."""
    return next(c.__name__ for c in cls.__mro__ if name in vars(c).get("__annotations__", {}))


def leaves(cls: type = Config, prefix: str = "") -> Iterator[tuple[str, tuple[str, str]]]:
    """(dotted key, (class name, field name)) of every parameter that is not itself a section, in schema order."""
    types = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(types[f.name]):
            yield from leaves(types[f.name], f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, (owner(cls, f.name), f.name)


@functools.cache  # every key's default reads it
def composed() -> dict[str, Config]:
    """The config `python launch.py` composes (under "") and the one `training_mode=<mode>` composes, per mode."""
    return {"": compose_config()} | {m: compose_config([f"{MODE_KEY}={m}"]) for m in MODES}


def default(key: str) -> str:
    """`a`, or `a` (opd: `b`) where a training mode's group changes it."""
    values = {mode: literal(functools.reduce(getattr, key.split("."), cfg)) for mode, cfg in composed().items()}
    base = values.pop("")
    changed = [f"{mode}: `{v}`" for mode, v in values.items() if v != base and key not in MODE_SET]
    return f"`{base}`" + (f" ({', '.join(changed)})" if changed else "")


def cell(text: str) -> str:
    return text.replace("|", "\\|")  # GFM's escape, which also holds inside code spans


def table(keys: list[str]) -> list[str]:
    meanings = field_comments(inspect.getsource(schema))
    where = dict(leaves())
    missing = [k for k in keys if k not in where]
    if missing:
        raise ValueError(f"not parameters of prime_rl/config/schema.py: {', '.join(missing)}")
    rows = [f"| `{k}` | {cell(default(k))} | {bounds(*where[k])} | {cell(meanings[where[k]])} |" for k in keys]
    return ["| parameter | default | range | meaning |", "|---|---|---|---|", *rows]


def bounds(owner_name: str, name: str) -> str:
    """A field's range as its type declares it (schema.py's Count, Share, ...: config/ranges.py checks them)."""
    hint = typing.get_type_hints(getattr(schema, owner_name), include_extras=True)[name]
    annotated = [a for a in (hint, *typing.get_args(hint)) if typing.get_origin(a) is typing.Annotated]
    limits = [
        f"{op} {getattr(bound, attr)}"
        for bound in (annotated[0].__metadata__ if annotated else ())
        for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
        if getattr(bound, attr, None) is not None
    ]
    return ", ".join(limits)


def sections() -> dict[str, list[str]]:
    """Heading -> keys, a heading per top-level section (the top-level parameters first, under their own)."""
    comments = field_comments(inspect.getsource(schema))
    out: dict[str, list[str]] = {}
    for key, _ in leaves():
        section, _, rest = key.partition(".")
        heading = f"`{section}`: {comments[('Config', section)]}" if rest else "Top level"
        out.setdefault(heading, []).append(key)
    return out


def parameters_md() -> str:
    header = [
        "# Parameters",
        "",
        f"Generated from the field comments in `prime_rl/config/schema.py` and the defaults of `conf/` by `{COMMAND}`;"
        " do not edit.",
    ]
    body = [line for heading, keys in sections().items() for line in ["", f"## {heading}", "", *table(keys)]]
    return "\n".join(header + body + mode_tables()) + "\n"


def mode_tables() -> list[str]:
    """A section per built-in mode with knobs of its own (modes.<name>.*, from its dataclass in config/modes.py)."""
    comments = field_comments(inspect.getsource(modes))
    lines = []
    for mode in (m for m in MODES.values() if m.config is not None):
        rows = [
            f"| `modes.{mode.name}.{f.name}` | {cell(f'`{literal(f.default)}`')} |  | "
            f"{cell(comments[(mode.config.__name__, f.name)])} |"
            for f in dataclasses.fields(mode.config)
        ]
        heading = f"## `modes.{mode.name}`: the knobs of training_mode={mode.name} (docs/modes.md)"
        lines += ["", heading, "", "| parameter | default | range | meaning |", "|---|---|---|---|", *rows]
    return lines


def common_block() -> str:
    link = [
        "Every parameter, with its default and meaning: [Parameters](../parameters.md). It and this table",
        f"are generated from the comments in `prime_rl/config/schema.py` by `{COMMAND}`.",
    ]
    return "\n".join([BEGIN, "", *table(list(COMMON_KEYS)), "", *link, "", END])


def modes_block() -> str:
    rows = [
        f"| `{m.name}` | {ROLLOUTS[m.rollouts]} | {SCORERS[m.scorer]} | {cell(m.signal)} | {mode_knobs(m)} |"
        for m in MODES.values()
    ]
    header = ["| mode | rollouts | who scores the sampled tokens | signal | its knobs |", "|---|---|---|---|---|"]
    return "\n".join([MODES_BEGIN, "", *header, *rows, "", MODES_END])


def mode_knobs(mode: Mode) -> str:
    """The knobs that shape what the mode learns: the scorer's term's, its teacher's, its own."""
    knobs = ["`trainer.loss.teacher_tau`, `distill*`, `teacher_adv_*`"] if mode.scores_tokens else []
    knobs += ["`teacher.*`"] if mode.teacher else []
    knobs += [f"`modes.{mode.name}.{f.name}`" for f in dataclasses.fields(mode.config)] if mode.config else []
    return ", ".join(knobs or ["`trainer.loss.*`"])


def with_block(path: Path, begin: str, end: str, block: str) -> str:
    """The file with the block between the markers regenerated, the rest as it is."""
    text = path.read_text()
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{path.relative_to(ROOT)} must hold `{begin}` and `{end}` once each, around its table")
    before, rest = text.split(begin)
    return before + block + rest.split(end)[1]


def expected() -> dict[Path, str]:
    """Each generated file's content as the schema, the modes and conf/ make it now."""
    return {
        COMMON: with_block(COMMON, BEGIN, END, common_block()),
        PARAMETERS: parameters_md(),
        MODES_DOC: with_block(MODES_DOC, MODES_BEGIN, MODES_END, modes_block()),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale, write nothing")
    check = parser.parse_args(argv).check
    stale = {path: text for path, text in expected().items() if not path.exists() or path.read_text() != text}
    names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
    if check:
        if stale:
            sys.exit(f"error: {names} out of date with prime_rl/config/schema.py; fix: {COMMAND}")
        return
    for path, text in stale.items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
