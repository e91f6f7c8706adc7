"""The storage wing stays one wing (ADR 0032): backends are found by one selector, say what they
can do through the seam's declarations rather than being probed, and nothing below the log
imports it. Each check is shown to fail on a probe, so that it cannot pass by seeing nothing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.arch.test_merkle_leaf import foreign_imports
from tests.arch.test_structure import imports_of, modules_of, parsed

ROOT = Path(__file__).resolve().parents[2]
WING = ROOT / "engine" / "storage"
# getattr/hasattr inside the wing that probe no backend, each with its reason.
WING_GETATTR_ALLOWED = {
    ("postgres/dialect.py", "self._raw"): "PgCursor proxies psycopg's cursor it wraps",
    ("postgres/dialect.py", "self.raw"): "PgConnection proxies psycopg's connection it wraps",
    ("postgres/storage.py", "self._local"): "a thread's read connection, unset until it reads",
    ("sqlite/storage.py", "self._local"): "a thread's read connection, unset until it reads",
}
# What the wing may import of the engine outside it, and why: nothing that stands on a log.
WING_MAY_IMPORT = {
    "engine.errors": "the error tree every backend translates its failures into",
    "engine.chain": "the chain's genesis, the writers' tail before the first event",
    "engine.clock": "the time a log's copy records for its migrations",
    "engine.merkle.nodes": "the schema from which a log's copy has tree nodes to copy",
    "engine.process": "this process's id, to open no connection a forked child inherited",
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
    tree = parsed(path)
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
    tree = parsed(path)
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
    tree = parsed(path)
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
    """What engine/write/transaction.py, engine/notifier.py and adapters/services/runtime.py
    once did is caught; a cursor proxy that reaches through a writer to its cursor is not a
    probe."""
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
        "import adapters.cli, adapters.settings.log_sources, engine.storage.copy\n"
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


# -- the batch and the backends stand below the log ------------------------------------------


def test_wing_the_batch_and_the_backends_never_import_the_log() -> None:
    """No cycle in the core is held for every package by ``test_cycles``; this names the
    arrows that once closed it, so that a batch keeps getting a ``BatchContext``, not the Log."""
    modules = modules_of(ROOT / "engine")
    graph = {name: imports_of(path, set(modules)) for name, path in modules.items()}
    reaching = [
        name
        for name in graph
        if (name == "engine.notifier" or name.startswith(("engine.write", "engine.storage")))
        and "engine.log" in graph[name]
    ]
    assert not reaching, reaching


def test_wing_imports_nothing_that_stands_on_a_log() -> None:
    """The backends run the SQL of the log's own tables, ``streams`` among them, from the wing
    (``engine.storage.streams_table``), not from the projection that folds it."""
    found = foreign_imports(WING, WING_MAY_IMPORT)
    assert not found, "\n".join(found)


def test_wing_import_check_can_fail(tmp_path: Path) -> None:
    """What the SQLite and PostgreSQL writers once imported for the SQL of ``streams`` (the
    projection, over the projection framework) is caught; the errors and the chain are not."""
    for name in ("__init__.py", "errors.py", "chain.py", "streams.py", "storage/__init__.py"):
        (tmp_path / "engine" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "engine" / name).write_text("")
    (tmp_path / "engine" / "storage" / "writer.py").write_text(
        "from engine import chain\n"
        "from engine.errors import StorageError\n"
        "from engine.streams import StreamsProjection\n"
    )
    assert foreign_imports(tmp_path / "engine" / "storage", WING_MAY_IMPORT, tmp_path) == [
        "engine.storage.writer imports engine.streams"
    ]
