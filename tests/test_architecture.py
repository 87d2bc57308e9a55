"""The package rules of docs/architecture.md: processes meet through the run dir (prime_rl/protocol), so the
packages of different processes never import each other; the shared facts (protocol, config) import nothing
above them; and no private Hydra API is used."""

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

# package -> packages it must not import (anything under them)
FORBIDDEN = {
    "prime_rl.trainer": ("prime_rl.orchestrator", "prime_rl.launcher"),
    "prime_rl.monitor": ("prime_rl.orchestrator", "prime_rl.launcher", "prime_rl.trainer"),
    "prime_rl.orchestrator": ("prime_rl.trainer", "prime_rl.launcher", "prime_rl.monitor"),
    "prime_rl.teacher": ("prime_rl.trainer", "prime_rl.orchestrator", "prime_rl.launcher", "prime_rl.monitor"),
    "prime_rl.protocol": ("prime_rl.trainer", "prime_rl.orchestrator", "prime_rl.launcher", "prime_rl.monitor"),
    "prime_rl.config": ("prime_rl.trainer", "prime_rl.orchestrator", "prime_rl.launcher", "prime_rl.monitor"),
}
# package -> the only packages of the project it may import
ONLY = {
    "prime_rl.protocol": ("prime_rl.protocol",),
    "prime_rl.config": ("prime_rl.config", "prime_rl.protocol"),
}


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (a function-level import counts too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def violations(files: list[Path], root: Path = ROOT) -> list[str]:
    bad = []
    for path in files:
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        for package, forbidden in FORBIDDEN.items():
            if name == package or name.startswith(package + "."):
                bad += [f"{name} imports {m}" for m in imports(path) if m.startswith(forbidden)]
        for package, allowed in ONLY.items():
            if name == package or name.startswith(package + "."):
                ours = [m for m in imports(path) if m == "prime_rl" or m.startswith("prime_rl.")]
                bad += [f"{name} imports {m}" for m in ours if not m.startswith(allowed)]
    return bad


def python_files() -> list[Path]:
    return sorted([*(ROOT / "prime_rl").rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py"), ROOT / "launch.py"])


def test_process_packages_do_not_import_each_other():
    assert violations(python_files()) == []


def test_a_forbidden_import_is_caught(tmp_path):
    trainer = tmp_path / "prime_rl" / "trainer" / "loop.py"
    trainer.parent.mkdir(parents=True)
    trainer.write_text("def f():\n    from prime_rl.orchestrator.loop import run\n")
    assert violations([trainer], root=tmp_path) == ["prime_rl.trainer.loop imports prime_rl.orchestrator.loop"]


def test_an_upward_import_of_the_shared_facts_is_caught(tmp_path):
    rules = tmp_path / "prime_rl" / "config" / "rules.py"
    rules.parent.mkdir(parents=True)
    rules.write_text("from prime_rl.protocol.servers import SERVER_KEY_ENV\nfrom prime_rl.tasks import load_task\n")
    assert violations([rules], root=tmp_path) == ["prime_rl.config.rules imports prime_rl.tasks"]


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_hydra_api(path):
    assert not [m for m in imports(path) if m.startswith("hydra._internal")]
