"""The package rules of docs/architecture.md: the packages form layers, each importing only the layers below it
(processes meet through the run dir, so the packages of different processes never import each other, and the
shared facts in protocol/ and config/ import nothing above them); no module imports itself through a circle;
and no private Hydra API is used. Every import counts, also one inside a function."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Bottom to top. A package may import its own modules and those of the layers below, nothing else of the project.
LAYERS = [
    ["protocol"],  # what the processes exchange: imports nothing of the project
    ["config"],  # the typed schema, the modes, the rules
    ["models", "inference", "monitor"],  # where a model lives, the vLLM server and client, W&B
    ["tasks", "teacher", "weight_transfer"],  # data and rewards; the teacher's endpoints; weights pushed to vLLM
    ["judge"],  # rewards from a model: a teacher's server asked about each reply
    ["orchestrator", "trainer", "report"],  # the processes (and the sweep report): never each other
    ["prepare", "finetune"],  # model building before a run, and fine-tuning in one process, on the trainer's step
    ["launcher"],  # validates, plans, prepares and supervises everything below; a command's own server
    # the commands around the launcher's student server (launcher/server_handle.py), none of them the others': one
    # step of each process in one, a server that outlives runs, models evaluated around one
    ["devstep", "serve", "eval"],
]
LAYER = {f"prime_rl.{package}": level for level, packages in enumerate(LAYERS) for package in packages}


def imports(path: Path, with_names: bool = False) -> set[str]:
    """Every module a file imports, at any depth (a function-level import counts too); `with_names`: also
    `package.name` of each `from package import name`, which is a module when the name is a submodule."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names} if with_names else set()
    return found


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str | None:
    """`prime_rl.<package>` of a project module, None outside the project's packages."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "prime_rl" and len(parts) > 1 else None


def violations(files: list[Path], root: Path = ROOT) -> list[str]:
    """`a imports b` for every import of a module b at its own layer (another package) or above it."""
    bad = []
    for path in files:
        name = module_name(path, root)
        mine = package_of(name)
        if mine not in LAYER:
            continue
        for target in sorted(imports(path)):
            theirs = package_of(target)
            if theirs in LAYER and theirs != mine and LAYER[theirs] >= LAYER[mine]:
                bad.append(f"{name} imports {target}")
    return bad


def circles(files: list[Path], root: Path = ROOT) -> list[list[str]]:
    """The import circles among the project's modules (strongly connected components of more than one module)."""
    modules = {module_name(path, root): path for path in files}
    graph = {
        name: sorted(m for m in imports(path, True) if m in modules and m != name) for name, path in modules.items()
    }
    order, low, stack, found = {}, {}, [], []

    def visit(v: str) -> None:  # Tarjan's algorithm
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in graph:
        if v not in order:
            visit(v)
    return found


def python_files() -> list[Path]:
    return sorted([*(ROOT / "prime_rl").rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py"), ROOT / "launch.py"])


def test_every_package_is_in_a_layer():
    packages = {f"prime_rl.{p.name}" for p in (ROOT / "prime_rl").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYER)


def test_packages_import_only_the_layers_below():
    assert violations(python_files()) == []


def test_no_module_imports_itself_through_a_circle():
    assert circles(python_files()) == []


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


def test_a_circle_is_caught_also_through_a_function_level_import(tmp_path):
    tasks = tmp_path / "prime_rl" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "task.py").write_text("def load():\n    from prime_rl.tasks.hf import load_hf\n")
    (tasks / "hf.py").write_text("from prime_rl.tasks.task import Example\n")
    (tasks / "mix.py").write_text("from prime_rl.tasks.task import Example\n")
    files = sorted(tasks.glob("*.py"))
    assert circles(files, root=tmp_path) == [["prime_rl.tasks.hf", "prime_rl.tasks.task"]]


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_hydra_api(path):
    assert not [m for m in imports(path) if m.startswith("hydra._internal")]


@pytest.mark.integration
def test_the_launch_validates_without_importing_torch_or_transformers():
    """Every launch and every sweep point is validated in the launcher's process before anything starts (and the
    invalid-input catalogue runs it 80 times): torch and transformers alone take seconds to import, so they wait
    for a job that runs (a function-level import where a check needs them)."""
    heavy = "{'torch', 'transformers', 'vllm'}"
    code = f"import sys, launch, prime_rl.launcher.job; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
