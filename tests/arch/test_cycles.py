"""No import cycle in any tree: not between modules, and not between folders (design.md §1).

Two checks over each tree of ``TREES``, an import inside a function or under ``TYPE_CHECKING``
counting as any other (it hides a cycle from the interpreter, not from the reader who has to
hold both modules in mind at once):

- modules: no module reaches itself through the imports of others;
- folders: in each package, its members are its ``__init__``, each of its own modules, and each
  of its sub-packages taken whole; no member reaches itself through the others. A sub-package
  may use a module of its parent that does not use it back (``engine/storage/`` the engine's
  errors, which ``engine/log.py`` stands above), but two folders never use each other, even
  when no single module closes the loop (a writer that imports a projection whose folder
  imports the writer's seam).

A folder cycle is named by its package and its members: ``engine: engine.log, engine.storage``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.arch.test_structure import imports_of, modules_of

ROOT = Path(__file__).resolve().parents[2]
TREES = ("engine", "projections", "adapters", "bench")


def module_graph(tree: Path, root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of ``tree`` and the modules of ``tree`` it imports."""
    modules = modules_of(tree, root)
    known = set(modules)
    return {name: imports_of(path, known, root) - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
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


def import_cycles(tree: Path, root: Path = ROOT) -> list[list[str]]:
    """The module cycles of ``tree``, each as its sorted module names."""
    return sorted(cycles(module_graph(tree, root)))


def members(package: str, graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between the members of ``package``: its ``__init__`` (named as the
    package), its own modules, and its sub-packages, each taken whole."""

    def member(module: str) -> str | None:
        if module == package:
            return package
        if not module.startswith(package + "."):
            return None
        return f"{package}.{module[len(package) + 1 :].split('.')[0]}"

    found: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = member(module)
        if here is None:
            continue
        arrows = found.setdefault(here, set())
        for target in targets:
            there = member(target)
            if there is not None and there != here:
                arrows.add(there)
                found.setdefault(there, set())
    return found


def folder_cycles(tree: Path, root: Path = ROOT) -> list[str]:
    """The folder cycles of ``tree``, in every package of it: ``package: member, ...``."""
    graph = module_graph(tree, root)
    packages = {".".join(path.parent.relative_to(root).parts) for path in tree.rglob("*.py")}
    return [
        f"{package}: {', '.join(cycle)}"
        for package in sorted(packages)
        for cycle in sorted(cycles(members(package, graph)))
    ]


@pytest.mark.parametrize("tree", TREES)
def test_cycles_none_between_modules(tree: str) -> None:
    found = import_cycles(ROOT / tree)
    assert not found, f"import cycles in {tree}: {found}"


@pytest.mark.parametrize("tree", TREES)
def test_cycles_none_between_folders(tree: str) -> None:
    found = folder_cycles(ROOT / tree)
    assert not found, f"folder cycles in {tree}:\n" + "\n".join(found)


def test_cycles_the_checks_can_fail(tmp_path: Path) -> None:
    """A module cycle closed by a function-level import, one closed under TYPE_CHECKING through
    a relative import, and a folder cycle no module closes (a writer of ``store/`` importing a
    projection of ``views/``, as the SQLite writer once did, whose folder imports the store's
    seam) are all reported; a package's module used by its sub-package and standing above
    another (``errors``, ``log``) is not, nor is a plain chain."""
    core = tmp_path / "core"
    files = {
        "__init__.py": "from core.log import Log\n",
        "errors.py": "",
        "log.py": "from core import batch\nfrom core.store import seam\nclass Log: ...\n",
        "batch.py": "def run():\n    from core.log import Log\n    return Log\n",
        "reads.py": "import typing\nif typing.TYPE_CHECKING:\n    from .notes import N\n",
        "notes.py": "from core import reads\nclass N: ...\n",
        "chain.py": "from core import batch\n",
        "store/__init__.py": "",
        "store/seam.py": "from core import errors\n",
        "store/writer.py": "from core.views.heads import SQL\n",
        "views/__init__.py": "",
        "views/heads.py": "from core.store.seam import Row\nSQL = ''\n",
    }
    for name, text in files.items():
        (core / name).parent.mkdir(parents=True, exist_ok=True)
        (core / name).write_text(text)
    assert import_cycles(core, tmp_path) == [
        ["core.batch", "core.log"],
        ["core.notes", "core.reads"],
    ]
    assert folder_cycles(core, tmp_path) == [
        "core: core.batch, core.log",
        "core: core.notes, core.reads",
        "core: core.store, core.views",
    ]
