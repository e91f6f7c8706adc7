"""The storage backends the contract suite runs against, by name.

Each entry makes a fresh, empty storage for one test in a temporary folder. A new backend
adds its entry here; every contract test then runs against it unchanged. PostgreSQL runs on
the session's embedded cluster (``tests.support.postgres``), one schema per test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.storage import Storage
from engine.storage.sqlite.storage import SqliteStorage


def _sqlite(folder: Path) -> Storage:
    # A real file in WAL mode, never :memory:: the suite checks what a log file does.
    return SqliteStorage(str(folder / "contract.db"), "full", 10_000)


def _postgres(folder: Path) -> Storage:
    from engine.storage.postgres.storage import PostgresStorage
    from tests.support.postgres import session_cluster

    # One schema per test folder: two storages made for one test share the log, as two
    # SQLite storages on one file do.
    return PostgresStorage(session_cluster().url_for(folder))


BACKENDS: dict[str, Callable[[Path], Storage]] = {"sqlite": _sqlite, "postgres": _postgres}


def log_target(backend: str, folder: Path) -> str:
    """What ``open_log`` and ``open_engine`` take for a log of ``backend`` in ``folder``: a
    file path, or a PostgreSQL URL with a schema of its own (also for a child process)."""
    if backend == "sqlite":
        return str(folder / "log.db")
    from tests.support.postgres import session_cluster

    return session_cluster().url_for(folder)
