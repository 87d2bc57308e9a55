"""The tables of BENCHMARKS.md (and the README's summary) are rendered from bench/results/*.jsonl, so a number
in them cannot drift from the record it came from.

A table is a template in an HTML comment, then what it renders to, then an end marker:

    <!-- table from model_size@2026-12-05T23:53:13 as r
    | size | params | steps/min |
    | s | {r.sizes.s.params / 1e6:.1f} M | {r.sizes.s.median.colocated.steps_per_min:.1f} |
    -->

    (the rendered table, and a line naming its records)
    <!-- end table -->

`from` names each record by its results file's stem and its `time`, `as` the alias its placeholders use; several
are comma-separated, and a path into one can have an alias of its own (`..., r.sizes.s as s`).

A placeholder is `{expression}` or `{expression:format}` (Python's format spec). An expression is a path (an
alias, then keys or list indices joined by dots; `[any key]` for a key with dots, spaces or + - * /; `*` for
every item, which makes a list), a number, or several of them joined by + - * /, taken left to right and item by
item over lists (`{p.vocab * p.seq * 2 / 1048576:.0f}`). `median(...)`, `min(...)` and `max(...)` reduce a list
or several comma-separated values (`{median(r.runs.*.ready - r.runs.*.imports):.1f}`); `reach(curve, level)` is
the first x of a curve of [x, ..., y] points whose y is at least level. A null (or an infinity: not reached)
renders as "—", or as the text after `??` (`{r.target_step ?? > 80}`). Without a format, a number gets three
significant digits (from 1,000 on, and an integer, none after the point).

    .venv/bin/python bench/tables.py           # re-render every table in place
    .venv/bin/python bench/tables.py --check   # exit 1 and name each table whose text differs from its records
"""

import argparse
import json
import math
import operator
import os
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

BLOCK = re.compile(
    r"<!-- table from (?P<sources>[^\n]+)\n(?P<template>.*?)\n-->\n\n(?P<body>.*?)<!-- end table -->", re.S
)
SOURCE = re.compile(r"\s*(?:(?P<stem>[\w.]+)@(?P<time>\S+)|(?P<path>[^@\s]+)) as (?P<alias>\w+)\s*")
PLACEHOLDER = re.compile(r"\{(?P<expr>[^{}:?]+)(?::(?P<spec>[^{}?]*))?(?:\?\?(?P<none>[^{}]*))?\}")
NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
TERM = rf"(?:[A-Za-z_]\w*(?:\.(?:\*|-\d+|[^\s.\[\]+*/-]+)|\.?\[[^\]]+\])+|{NUMBER})"
EXPRESSION = re.compile(rf"\s*{TERM}(?:\s*[-+*/]\s*{TERM})*\s*")
STEP = re.compile(rf"(?:^|(?P<op>[-+*/]))\s*(?P<term>{TERM})")
SEGMENT = re.compile(r"\.([^\s.\[\]]+)|\.?\[([^\]]+)\]")
OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
STATISTICS = {"median": statistics.median, "min": min, "max": max}
REACH = re.compile(rf"\s*reach\((?P<curve>.*),\s*(?P<level>{NUMBER})\)\s*")
CALL = re.compile(rf"\s*(?P<name>{'|'.join(STATISTICS)})\((?P<inner>.*)\)\s*")


class TableError(ValueError):
    """A template that cannot be rendered: the message names the file, the table and what is wrong."""


def record(stem: str, time: str, results: Path = RESULTS) -> dict:
    """The line of bench/results/<stem>.jsonl whose `time` is `time`."""
    path = results / f"{stem}.jsonl"
    if not path.exists():
        raise TableError(f"no results file {os.path.relpath(path, REPO)}")
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("time") == time:
            return row
    raise TableError(f"{os.path.relpath(path, REPO)} has no record of {time}")


def lookup(path: str, records: dict[str, dict]):
    alias, rest = re.match(r"([A-Za-z_]\w*)(.*)", path).groups()
    if alias not in records:
        raise TableError(f"{path}: no record is named {alias!r} (the table names {', '.join(records)})")
    return walk(records[alias], [dotted or bracketed for dotted, bracketed in SEGMENT.findall(rest)], path)


def walk(value, keys: list[str], path: str):
    """The value at keys below value; `*` takes every item of a list (or value of a dict) and gives a list."""
    for i, key in enumerate(keys):
        if key == "*" and isinstance(value, (list, dict)):
            items = value if isinstance(value, list) else value.values()
            return [walk(item, keys[i + 1 :], path) for item in items]
        if isinstance(value, list) and key.lstrip("-").isdigit() and -len(value) <= int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            raise TableError(f"{path}: the record has no {key!r} there")
    return value


def term(text: str, records: dict[str, dict]):
    if re.fullmatch(NUMBER, text):
        return float(text)
    return lookup(text, records)


def evaluate(expr: str, records: dict[str, dict]):
    """A path or number, or several joined by + - * /, taken left to right, item by item where a path has `*`; null
    where a part is null (or a divisor zero). median(...), min(...), max(...) of such a list skip its nulls."""
    reach = REACH.fullmatch(expr)
    if reach:
        return reached(evaluate(reach["curve"], records), float(reach["level"]), expr)
    call = CALL.fullmatch(expr)
    if call:
        values = [evaluate(part, records) for part in top_level_parts(call["inner"])]
        if len(values) == 1 and not isinstance(values[0], list):
            raise TableError(f"{{{expr}}}: {call['name']} needs a path with * (a list), or several values")
        flat = [v for value in values for v in (value if isinstance(value, list) else [value])]
        present = [v for v in flat if v is not None]
        return STATISTICS[call["name"]](present) if present else None
    if not EXPRESSION.fullmatch(expr):
        raise TableError(f"{{{expr}}}: not a path, a number, or several joined by + - * /")
    value = None
    for step in STEP.finditer(expr.strip()):
        operand = term(step["term"], records)
        value = operand if step["op"] is None else combined(value, step["op"], operand)
    return value


def top_level_parts(text: str) -> list[str]:
    """text split at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def reached(curve, level: float, expr: str):
    """The first x of a curve ([[x, y], ...], or [[x, t, y], ...]: y last) whose y is >= level; null if none. A list
    of curves gives a list."""
    if not isinstance(curve, list):
        raise TableError(f"{{{expr}}}: reach needs a curve, a list of [x, ..., y]")
    if curve and isinstance(curve[0], list) and curve[0] and isinstance(curve[0][0], list):
        return [reached(c, level, expr) for c in curve]
    return next((point[0] for point in curve if point[-1] >= level), None)


def combined(left, op: str, right):
    if isinstance(left, list) or isinstance(right, list):
        n = len(left) if isinstance(left, list) else len(right)
        lefts = left if isinstance(left, list) else [left] * n
        rights = right if isinstance(right, list) else [right] * n
        return [combined(a, op, b) for a, b in zip(lefts, rights, strict=True)]
    if left is None or right is None or (op == "/" and not right):
        return None
    return OPERATORS[op](left, right)


def formatted(value, spec: str | None, none: str | None = None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—" if none is None else none.strip()
    spec = (spec or "").strip()
    if spec:
        text = format(value, spec) if value or not spec.endswith("e") else "0"
        return re.sub(r"e([+-])0*(\d)", lambda m: f"e{m[1].strip('+')}{m[2]}", text)  # 5.9e-05 -> 5.9e-5
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if abs(value) >= 1000 or isinstance(value, int):
        return f"{value:,.0f}"
    return f"{value:#.3g}".rstrip(".")  # 0.150 keeps its zero, 106. loses its point


def render(sources: str, template: str, results: Path = RESULTS) -> str:
    """The markdown a table's template renders to: its header, the separator, each row, and its records."""
    records, named = {}, []
    for source in sources.split(","):
        match = SOURCE.fullmatch(source)
        if not match:
            raise TableError(f"{source.strip()!r}: write a source as <results file stem>@<time> as <alias>")
        if match["path"]:
            records[match["alias"]] = lookup(match["path"], records)
            continue
        records[match["alias"]] = record(match["stem"], match["time"], results)
        named.append(f"`{match['stem']}.jsonl` {match['time']} (commit {commit(records[match['alias']])})")
    header, *rows = template.splitlines()
    columns = header.count("|") - 1
    lines = [header, "|" + "---|" * columns]
    for row in rows:
        lines.append(PLACEHOLDER.sub(lambda m: formatted(evaluate(m["expr"], records), m["spec"], m["none"]), row))
    return "\n".join([*lines, "", f"<sub>From {', '.join(named)}.</sub>", ""])


def commit(row: dict) -> str:
    return (row.get("machine_at_start") or {}).get("commit", "unknown")


def rendered(text: str, where: str, results: Path = RESULTS) -> tuple[str, list[int]]:
    """The text with every table re-rendered, and the line numbers of the tables whose body changed."""
    out, stale, end = [], [], 0
    for block in BLOCK.finditer(text):
        line = text.count("\n", 0, block.start()) + 1
        try:
            body = render(block["sources"], block["template"], results)
        except TableError as e:
            raise TableError(f"{where}:{line}: {e}") from None
        if body != block["body"]:
            stale.append(line)
        out += [text[end : block.start("body")], body]
        end = block.end("body")
    return "".join([*out, text[end:]]), stale


def documents() -> list[Path]:
    return [REPO / "BENCHMARKS.md", REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    args = parser.parse_args()
    stale_tables = []
    for path in documents():
        where = str(path.relative_to(REPO))
        try:
            text, stale = rendered(path.read_text(), where, RESULTS)
        except TableError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        stale_tables += [f"{where}:{line}" for line in stale]
        if stale and not args.check:
            path.write_text(text)
    verb = "differ from their records" if args.check else "re-rendered"
    print(f"{len(stale_tables)} table(s) {verb}" + "".join(f"\n  {t}" for t in stale_tables))
    return 1 if args.check and stale_tables else 0


if __name__ == "__main__":
    sys.exit(main())
