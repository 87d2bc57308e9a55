"""BENCHMARKS.md's tables (and the README's benchmark rows) are rendered from bench/results/*.jsonl by bench/tables.py:
every table in the repo matches its records, an edited number is caught, and the template language computes what its
docstring says (paths, wildcards, arithmetic, medians, nulls, curves)."""

import importlib.util
import json
import sys

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "bench" / "tables.py")
tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tables)

RECORD = {
    "time": "2026-01-01T00:00:00",
    "machine_at_start": {"commit": "abc1234"},
    "sizes": {"s": {"params": 4100352, "steps_per_min": 33.2085}, "m": {"params": 13200000, "steps_per_min": None}},
    "runs": [
        {"imports": 7.0, "ready": 16.0, "curve": [[0, 0.2], [5, 0.5], [10, 0.9]], "steps": float("inf")},
        {"imports": 6.0, "ready": 17.0, "curve": [[0, 0.3], [5, 0.95], [10, 0.97]], "steps": 5},
        {"imports": 8.0, "ready": 15.5, "curve": [[0, 0.1], [5, 0.2], [10, 0.4]], "steps": 10},
    ],
    "time/step keys": {"time/step": 0.3156},
    "kl": 5.94e-05,
}


@pytest.fixture
def results(tmp_path):
    (tmp_path / "demo.jsonl").write_text(json.dumps({"time": "older"}) + "\n" + json.dumps(RECORD) + "\n")
    return tmp_path


def cell(results, expression: str) -> str:
    body = tables.render("demo@2026-01-01T00:00:00 as r", f"| x |\n| {expression} |", results)
    return body.splitlines()[2].strip("| ")


@pytest.mark.parametrize(
    ("expression", "text"),
    [
        ("{r.sizes.s.params / 1e6:.1f} M", "4.1 M"),  # a path, arithmetic, a format
        ("{r.sizes.s.steps_per_min}", "33.2"),  # three significant digits without a format
        ("{r.runs.0.imports}", "7.00"),
        ("{r.runs.-1.ready}", "15.5"),  # a negative index
        ("{r[time/step keys][time/step]:.2f}", "0.32"),  # keys with spaces and operators
        ("{r.sizes.m.steps_per_min}", "—"),  # null
        ("{r.sizes.m.steps_per_min / 2 ?? not run}", "not run"),  # null propagates; the text after ??
        ("{r.runs.0.steps ?? > 10}", "> 10"),  # infinity is "not reached"
        ("{median(r.runs.*.ready - r.runs.*.imports):.1f}", "9.0"),  # item by item over a wildcard, then the median
        ("{max(r.runs.*.imports, 9):g}", "9"),  # several values
        ("{1 + 2 * 3:g}", "9"),  # left to right
        ("{r.runs.0.imports / 0}", "—"),  # a zero divisor
        ("{reach(r.runs.1.curve, 0.9)}", "5"),  # the first x whose y reaches the level
        ("{median(reach(r.runs.*.curve, 0.9)):g}", "7.5"),  # over every run; the one that never reached it skipped
        ("{r.kl:.1e}", "5.9e-5"),  # exponents without padding
        ("{r.sizes.s.params}", "4,100,352"),
    ],
)
def test_a_placeholder_renders_what_the_record_holds(results, expression, text):
    assert cell(results, expression) == text


def test_a_table_names_its_records_and_an_alias_can_name_a_path_into_one(results):
    body = tables.render(
        "demo@2026-01-01T00:00:00 as r, r.sizes.s as s", "| a | b |\n| {s.steps_per_min:.0f} | x |", results
    )
    assert body.splitlines()[:3] == ["| a | b |", "|---|---|", "| 33 | x |"]
    assert "`demo.jsonl` 2026-01-01T00:00:00 (commit abc1234)" in body


@pytest.mark.parametrize(
    ("sources", "expression", "message"),
    [
        ("demo@2026-01-01T00:00:00 as r", "{r.sizes.xl.params}", "r.sizes.xl.params: the record has no 'xl' there"),
        ("demo@2026-01-01T00:00:00 as r", "{q.sizes}", "no record is named 'q'"),
        ("demo@2026-02-02T00:00:00 as r", "{r.kl}", "demo.jsonl has no record of 2026-02-02T00:00:00"),
        ("nothing@2026-01-01T00:00:00 as r", "{r.kl}", "no results file"),
        ("demo@2026-01-01T00:00:00 as r", "{r.kl ^ 2}", "not a path, a number, or several joined by + - * /"),
        ("demo@2026-01-01T00:00:00 as r", "{median(r.kl)}", "median needs a path with * (a list)"),
    ],
)
def test_a_template_that_cannot_render_says_where_and_why(results, sources, expression, message):
    page = f"# x\n\n<!-- table from {sources}\n| a |\n| {expression} |\n-->\n\n<!-- end table -->\n"
    with pytest.raises(tables.TableError, match="page.md:3: ") as error:
        tables.rendered(page, "page.md", results)
    assert message in str(error.value)


def test_every_table_in_the_repo_matches_its_records():
    stale = []
    for path in tables.documents():
        _, lines = tables.rendered(path.read_text(), path.name)
        stale += [f"{path.name}:{line}" for line in lines]
    assert not stale, f"tables differ from bench/results: {stale}; re-render them: .venv/bin/python bench/tables.py"


def test_an_edited_number_is_caught_and_a_rewrite_restores_only_the_table(results, tmp_path):
    template = "| size | steps/min |\n| s | {r.sizes.s.steps_per_min:.1f} |"
    body = tables.render("demo@2026-01-01T00:00:00 as r", template, results)
    page = (
        f"Intro 33.2.\n\n<!-- table from demo@2026-01-01T00:00:00 as r\n{template}\n-->\n\n{body}<!-- end table -->\n"
    )
    assert tables.rendered(page, "page.md", results) == (page, [])
    edited = page.replace("| s | 33.2 |", "| s | 35.0 |")
    text, stale = tables.rendered(edited, "page.md", results)
    assert (text, stale) == (page, [3])


def test_the_check_command_passes_on_the_repo_and_names_a_stale_table(results, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench/tables.py", "--check"])
    assert tables.main() == 0, capsys.readouterr()
    assert capsys.readouterr().out.startswith("0 table(s) differ from their records")
    template = "| a |\n| {r.kl:.1e} |"
    page = tmp_path / "page.md"
    page.write_text(f"<!-- table from demo@2026-01-01T00:00:00 as r\n{template}\n-->\n\n| a |\n<!-- end table -->\n")
    monkeypatch.setattr(tables, "documents", lambda: [page])
    monkeypatch.setattr(tables, "REPO", tmp_path)
    monkeypatch.setattr(tables, "RESULTS", results)
    assert tables.main() == 1
    assert capsys.readouterr().out == "1 table(s) differ from their records\n  page.md:1\n"
