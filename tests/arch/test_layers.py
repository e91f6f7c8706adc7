"""Dependencies point one way: adapters -> projections -> engine."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"engine": 0, "projections": 1, "adapters": 2}
EDGE_LIBRARIES = {"falcon", "gunicorn", "subprocess", "argparse"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_layers_never_import_upwards(package: str) -> None:
    for path in (ROOT / package).rglob("*.py"):
        for name in _imports(path):
            if name in LAYERS:
                assert LAYERS[name] <= LAYERS[package], f"{path.relative_to(ROOT)} imports {name}"


def test_layers_engine_stays_free_of_edge_libraries() -> None:
    for path in (ROOT / "engine").rglob("*.py"):
        found = _imports(path) & EDGE_LIBRARIES
        assert not found, f"{path.relative_to(ROOT)} imports {found}"


def test_layers_only_the_log_and_schema_touch_apsw() -> None:
    users = {p.name for p in (ROOT / "engine").rglob("*.py") if "apsw" in _imports(p)}
    assert users <= {"log.py"}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_layers_packages_load_from_this_repository(package: str) -> None:
    """``adapters`` and ``projections`` are also PyPI names: make sure ours are the ones used."""
    module = importlib.import_module(package)
    assert Path(module.__file__ or "").resolve().parent == ROOT / package


def _module_imports(path: Path) -> set[str]:
    """Modules of this repository that ``path`` imports, TYPE_CHECKING blocks included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in LAYERS:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] in LAYERS)
    return names


def test_layers_adapters_have_no_import_cycle() -> None:
    """Recovery talks to a narrow port: no module reaches back into one that imports it."""
    modules = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts): path
        for path in (ROOT / "adapters").rglob("*.py")
        if path.name != "__init__.py"
    }
    graph = {name: _module_imports(path) & modules.keys() for name, path in modules.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            for nxt in graph[name]:
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    cycles = [name for name in graph if reaches(name, name)]
    assert not cycles, f"import cycles through {sorted(cycles)}"
    assert "adapters.runtime" not in graph["adapters.recovery"]
    assert "adapters.runtime" not in graph["adapters.tenure"]
