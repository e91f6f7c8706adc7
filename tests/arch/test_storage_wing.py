"""The storage wing stays one wing (ADR 0032): backends are found by one selector, say what they
can do through the seam's declarations rather than being probed, and the core has no import
cycle. Each check is shown to fail on a probe, so that it cannot pass by seeing nothing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WING = ROOT / "engine" / "storage"
# Modules another change splits; the size limit waits for it.
OVERSIZE_ALLOWED = {"engine/audit/verifier.py"}
MAX_LINES = 450
# getattr/hasattr inside the wing that probe no backend, each with its reason.
WING_GETATTR_ALLOWED = {
    ("postgres/dialect.py", "self._raw"): "PgCursor proxies psycopg's cursor it wraps",
    ("postgres/dialect.py", "self.raw"): "PgConnection proxies psycopg's connection it wraps",
    ("postgres/storage.py", "self._local"): "a thread's read connection, unset until it reads",
    ("sqlite/storage.py", "self._local"): "a thread's read connection, unset until it reads",
}
# The strings that name a backend by a location's scheme: only the PostgreSQL URL module.
# (Not "postgres" alone: that is also the backend's name, ``engine.storage.Target.backend``.)
SCHEME_LITERALS = {"postgresql", "postgres://", "postgresql://"}
SCHEME_OWNER = "engine/storage/postgres/url.py"


def _last_name(node: ast.expr) -> str:
    """The name an expression ends in: ``log.storage`` -> storage, ``s.writer()`` -> writer."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return ""


def probes(path: Path) -> list[tuple[int, str]]:
    """``(line, first argument)`` of every getattr/hasattr call in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.lineno, ast.unparse(node.args[0]))
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and node.args
    ]


def backend_probes(path: Path) -> list[str]:
    """getattr/hasattr on an object that is a storage or a writer, by the name it ends in."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and node.args
        and any(word in _last_name(node.args[0]).lower() for word in ("storage", "writer"))
    ]


def scheme_literals(path: Path) -> list[str]:
    """String constants that are a backend's URL scheme (docstrings are prose, not choices)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        f"{path}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and node.value.lower() in SCHEME_LITERALS
    ]


def imports_anywhere(path: Path, modules: set[str]) -> set[str]:
    """The ``modules`` that ``path`` imports, at any depth (functions and TYPE_CHECKING blocks
    included). ``from a import b`` is the module ``a.b`` when there is one, else ``a``; a
    package's ``__init__`` run on the way to its module is not counted as an import."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                names.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names & modules


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def cycles(graph: dict[str, set[str]]) -> list[str]:
    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    return sorted(name for name in graph if reaches(name, name))


def core_graph(root: Path) -> dict[str, set[str]]:
    """The import graph of the generic core's modules (``engine``, not its domain layer)."""
    paths = {
        module_name(p, root): p
        for p in (root / "engine").rglob("*.py")
        if "domain" not in p.relative_to(root).parts
    }
    return {name: imports_anywhere(path, set(paths)) for name, path in paths.items()}


# -- declared capabilities, never probed ------------------------------------------------------


def test_wing_nothing_probes_a_storage_or_a_writer() -> None:
    problems = [
        problem
        for package in ("engine", "adapters")
        for path in sorted((ROOT / package).rglob("*.py"))
        for problem in backend_probes(path)
    ]
    assert not problems, "\n".join(problems)


def test_wing_uses_getattr_only_where_it_says_why() -> None:
    found = {
        (path.relative_to(WING).as_posix(), argument)
        for path in sorted(WING.rglob("*.py"))
        for _, argument in probes(path)
    }
    assert found <= WING_GETATTR_ALLOWED.keys(), sorted(found - WING_GETATTR_ALLOWED.keys())


def test_wing_probe_checks_can_fail(tmp_path: Path) -> None:
    """What engine/transaction.py, engine/notifier.py and adapters/runtime.py once did is
    caught; a cursor proxy that reaches through a writer to its cursor is not a probe."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "read = getattr(self.writer, 'stream_heads', None)\n"
        "trust = hasattr(self.writer, 'collided')\n"
        "early = getattr(log.storage.writer(), 'begins_while_gathering', False)\n"
        "own = getattr(log.storage, 'notifier', None)\n"
        "identity = getattr(self.engine.log.storage, 'identity', None)\n"
        "fine = getattr(self._tx.writer.cursor, name)\n"
    )
    assert [line.split(": ", 1)[1] for line in backend_probes(probe)] == [
        "getattr(self.writer, 'stream_heads', None)",
        "hasattr(self.writer, 'collided')",
        "getattr(log.storage.writer(), 'begins_while_gathering', False)",
        "getattr(log.storage, 'notifier', None)",
        "getattr(self.engine.log.storage, 'identity', None)",
    ]
    assert [argument for _, argument in probes(probe)][-1] == "self._tx.writer.cursor"


# -- one selector ---------------------------------------------------------------------------


def test_wing_only_the_url_module_names_a_backend_scheme() -> None:
    problems = [
        problem
        for package in ("engine", "adapters", "projections")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != SCHEME_OWNER
        for problem in scheme_literals(path)
    ]
    assert not problems, "\n".join(problems)
    assert scheme_literals(ROOT / SCHEME_OWNER)


def test_wing_scheme_check_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""Opens postgresql:// URLs."""\n'
        "def f(t):\n"
        '    """A postgres:// URL or a file."""\n'
        '    return t.startswith(("postgresql://", "postgres://"))\n'
    )
    assert [line.split(": ", 1)[1] for line in scheme_literals(probe)] == [
        "'postgresql://'",
        "'postgres://'",
    ]


def test_wing_sqlite_path_never_imports_psycopg(tmp_path: Path) -> None:
    """A SQLite-only install never needs psycopg: opening, writing, copying and auditing a file
    log load no PostgreSQL module."""
    script = (
        "import sys\n"
        "import adapters.cli, adapters.log_sources, engine.log_copy\n"
        "from engine import open_log, open_notifier\n"
        "from engine.storage import check_target, parse_target\n"
        "from tests.support.tickets import MACHINES, TicketOpened\n"
        f"log = open_log({str(tmp_path / 'log.db')!r}, MACHINES)\n"
        "log.append('ticket:a', 0, [TicketOpened()])\n"
        "open_notifier(log).stop()\n"
        "assert parse_target('postgresql://h/db?schema=x').shown\n"
        "check_target(log.path)\n"
        "log.close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0].startswith('psycopg')"
        " or m.startswith('engine.storage.postgres.') and not m.endswith('.url')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- no cycle in the core -------------------------------------------------------------------


def test_wing_the_core_has_no_import_cycle() -> None:
    graph = core_graph(ROOT)
    found = cycles(graph)
    assert not found, f"import cycles through {found}"
    for name in ("engine.transaction", "engine.batch", "engine.batch_context", "engine.notifier"):
        assert "engine.log" not in graph[name], name
    for name in graph:
        if name.startswith("engine.storage"):
            assert "engine.log" not in graph[name], name


def test_wing_cycle_check_can_fail() -> None:
    """engine.log -> engine.transaction -> engine.log under TYPE_CHECKING, as it once was."""
    graph = {
        "engine.log": {"engine.transaction"},
        "engine.transaction": {"engine.log"},
        "engine.clock": set(),
    }
    assert cycles(graph) == ["engine.log", "engine.transaction"]


# -- sizes ----------------------------------------------------------------------------------


def test_wing_no_core_module_is_over_the_size_limit() -> None:
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for path in (ROOT / "engine").rglob("*.py")
    }
    over = {p: n for p, n in sizes.items() if n > MAX_LINES and p not in OVERSIZE_ALLOWED}
    assert not over, over
