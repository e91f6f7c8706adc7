"""The storage backends the contract suite runs against, by name.

Each entry makes a fresh, empty storage for one test in a temporary folder. A new backend
(PostgreSQL, a later issue) adds its entry here, skipping when its server is not available;
every contract test then runs against it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.sqlite_storage import SqliteStorage
from engine.storage import Storage


def _sqlite(folder: Path) -> Storage:
    # A real file in WAL mode, never :memory:: the suite checks what a log file does.
    return SqliteStorage(str(folder / "contract.db"), "full", 10_000)


BACKENDS: dict[str, Callable[[Path], Storage]] = {"sqlite": _sqlite}
