"""Limits that keep the code easy to read: small modules and no import cycle in any package.

An import inside a function or under ``TYPE_CHECKING`` still counts as an arrow: it hides a
cycle from the interpreter, not from the reader who has to hold both modules in mind at once.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "projections", "adapters")
MAX_LINES = 450


def module_name(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def modules_of(package: Path, root: Path = ROOT) -> dict[str, Path]:
    return {module_name(path, root): path for path in package.rglob("*.py")}


def import_statements(path: Path, package: str) -> Iterator[tuple[str, str | None]]:
    """Every import in ``path``, wherever it stands, as ``(module, name)``: ``import a.b`` is
    ``("a.b", None)``, ``from a import b`` is ``("a", "b")``; a relative import is resolved
    against ``package``, the dotted name of the package ``path`` is in."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            yield from ((base, alias.name) for alias in node.names)


def package_of(path: Path, root: Path = ROOT) -> str:
    return module_name(path if path.name == "__init__.py" else path.parent, root)


def imports_of(path: Path, known: set[str], root: Path = ROOT) -> set[str]:
    """The modules of ``known`` that ``path`` imports, wherever the import statement stands.

    ``from a import b`` is an arrow to ``a.b`` when that is a module, else to ``a`` (a name
    re-exported by the package), so ``from engine import chain`` does not count as importing
    everything ``engine/__init__.py`` imports.
    """
    found = set()
    for module, name in import_statements(path, package_of(path, root)):
        whole = f"{module}.{name}"
        found.add(whole if name is not None and whole in known else module)
    return found & known


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def import_cycles(package: Path, root: Path = ROOT) -> list[list[str]]:
    modules = modules_of(package, root)
    known = set(modules)
    graph = {name: imports_of(path, known, root) - {name} for name, path in modules.items()}
    return sorted(cycles(graph))


def oversize(package: Path, root: Path = ROOT) -> list[str]:
    return [
        f"{path.relative_to(root)}: {lines} lines"
        for path in sorted(package.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_structure_no_import_cycle(package: str) -> None:
    found = import_cycles(ROOT / package)
    assert not found, f"import cycles in {package}: {found}"


@pytest.mark.parametrize("package", PACKAGES)
def test_structure_no_module_over_the_limit(package: str) -> None:
    found = oversize(ROOT / package)
    assert not found, f"split these modules (limit {MAX_LINES} lines): {found}"


def test_structure_the_checks_can_fail(tmp_path: Path) -> None:
    """A cycle closed by a function-level import, one closed under TYPE_CHECKING through a
    relative import, and an oversize module are all reported; a plain chain is not."""
    core = tmp_path / "core"
    core.mkdir()
    (core / "__init__.py").write_text("from core.log import Log\n")
    (core / "log.py").write_text("from core import batch\nclass Log: ...\n")
    (core / "batch.py").write_text("def run():\n    from core.log import Log\n    return Log\n")
    (core / "reads.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .notes import Note\n"
    )
    (core / "notes.py").write_text("from core import reads\nclass Note: ...\n")
    (core / "chain.py").write_text("from core import batch\n")
    (core / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert import_cycles(core, tmp_path) == [
        ["core.batch", "core.log"],
        ["core.notes", "core.reads"],
    ]
    assert oversize(core, tmp_path) == [f"core/big.py: {MAX_LINES + 1} lines"]
