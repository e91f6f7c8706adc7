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


def test_layers_only_the_sqlite_backend_touches_apsw() -> None:
    """Everything above the storage seam is backend-neutral (ADR 0022)."""
    users = {p.name for p in (ROOT / "engine").rglob("*.py") if "apsw" in _imports(p)}
    assert users <= {"sqlite_storage.py"}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_layers_packages_load_from_this_repository(package: str) -> None:
    """``adapters`` and ``projections`` are also PyPI names: make sure ours are the ones used."""
    module = importlib.import_module(package)
    assert Path(module.__file__ or "").resolve().parent == ROOT / package
