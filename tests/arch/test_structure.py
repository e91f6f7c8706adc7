"""A limit that keeps the code easy to read (small modules), and how the arch tests read imports.

Every import is read wherever it stands: one inside a function or under ``TYPE_CHECKING`` still
counts as an arrow (``test_cycles`` finds the cycles such arrows close).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "projections", "adapters")
MAX_LINES = 450


def module_name(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def modules_of(package: Path, root: Path = ROOT) -> dict[str, Path]:
    return {module_name(path, root): path for path in package.rglob("*.py")}


def parsed(path: Path) -> ast.Module:
    """``path`` parsed, once per version of the file in this process: the arch checks walk the
    same modules again and again, and parsing the tree is most of what they cost. The tree is
    shared: read it, never change it."""
    stat = path.stat()
    return _parsed(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parsed(path: Path, _mtime_ns: int, _size: int) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def import_statements(path: Path, package: str) -> tuple[tuple[str, str | None], ...]:
    """Every import in ``path``, wherever it stands, as ``(module, name)``: ``import a.b`` is
    ``("a.b", None)``, ``from a import b`` is ``("a", "b")``; a relative import is resolved
    against ``package``, the dotted name of the package ``path`` is in."""
    return _import_statements(parsed(path), package)


@functools.cache
def _import_statements(tree: ast.Module, package: str) -> tuple[tuple[str, str | None], ...]:
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found += ((base, alias.name) for alias in node.names)
    return tuple(found)


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


def oversize(package: Path, root: Path = ROOT) -> list[str]:
    return [
        f"{path.relative_to(root)}: {lines} lines"
        for path in sorted(package.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_structure_no_module_over_the_limit(package: str) -> None:
    found = oversize(ROOT / package)
    assert not found, f"split these modules (limit {MAX_LINES} lines): {found}"


def test_structure_the_checks_can_fail(tmp_path: Path) -> None:
    """An oversize module is reported; one at the limit is not."""
    core = tmp_path / "core"
    core.mkdir()
    (core / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (core / "fits.py").write_text("x = 1\n" * MAX_LINES)
    assert oversize(core, tmp_path) == [f"core/big.py: {MAX_LINES + 1} lines"]
