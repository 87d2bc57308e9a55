"""docs/parameters.md and the table of common knobs in docs/reference/config.md are generated from the field comments in
prime_rl/config/schema.py, the table of modes in docs/modes.md from MODES (`python -m prime_rl.config.reference`);
these tests keep them in step, and keep every field commented, since that comment is the only description a key has."""

import importlib.util
import sys

import pytest

from prime_rl.config import reference, schema


@pytest.mark.parametrize("path", [reference.COMMON, reference.PARAMETERS, reference.MODES_DOC], ids=lambda p: p.name)
def test_generated_parameter_docs_are_current(path):
    assert path.read_text() == reference.expected()[path], f"{path.name} is stale; regenerate it: {reference.COMMAND}"


def test_check_names_the_stale_files_and_the_fix_and_a_rewrite_touches_only_the_block(tmp_path, monkeypatch):
    common, parameters = tmp_path / "docs" / "reference" / "config.md", tmp_path / "docs" / "parameters.md"
    common.parent.mkdir(parents=True)
    common.write_text(f"# before\n\n{reference.BEGIN}\nhand-written\n{reference.END}\n\nafter\n")
    monkeypatch.setattr(reference, "ROOT", tmp_path)
    monkeypatch.setattr(reference, "COMMON", common)
    monkeypatch.setattr(reference, "PARAMETERS", parameters)
    with pytest.raises(SystemExit) as stale:
        reference.main(["--check"])
    stale_files = "docs/reference/config.md, docs/parameters.md"
    fix = f"fix: {reference.COMMAND}"
    assert str(stale.value) == f"error: {stale_files} out of date with prime_rl/config/schema.py; {fix}"
    assert not parameters.exists() and "hand-written" in common.read_text()

    reference.main([])
    reference.main(["--check"])
    before, _, after = common.read_text().partition(reference.common_block())
    assert (before, after) == ("# before\n\n", "\n\nafter\n")
    assert parameters.read_text() == reference.parameters_md()


def test_every_schema_field_has_a_comment():
    assert reference.uncommented(schema) == [], "give each field a one-line trailing comment: `name: type = x  # ...`"


def test_a_field_without_a_comment_is_caught(tmp_path, monkeypatch):
    source = tmp_path / "fake_schema.py"
    source.write_text(
        "from dataclasses import dataclass, field\n\n\n"
        "@dataclass\nclass Fake:\n"
        "    said: int = 1  # what it does\n"
        "    silent: int = 2\n"
        "    blank: int = 3  #\n"
        "    hashed: str = '#'\n"
        "    spread: list[int] = field(\n        default_factory=list\n    )  # the comment after the closing line\n"
    )
    spec = importlib.util.spec_from_file_location("fake_schema", source)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fake_schema", module)
    spec.loader.exec_module(module)
    assert reference.uncommented(module) == ["Fake.silent", "Fake.blank", "Fake.hashed"]
