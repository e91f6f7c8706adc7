"""Where the audit commands read a log from: a SQLite file, or a PostgreSQL URL.

A file is read in place, as always. A PostgreSQL log is read in place by the raw commands
(history, state, export, tail: ``engine.audit.postgres_source``), and by the others (verify,
checkpoint, diff) through a consistent SQLite copy in a temporary folder, made with
``engine.storage.copy`` (same rows, same chain), which they read as they read any file. So
``diff`` compares a PostgreSQL log with its SQLite copy, or any two logs on either backend.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from engine.audit import Reader, open_reader
from engine.storage import check_target, parse_target


@contextlib.contextmanager
def as_file(db: str) -> Iterator[str]:
    """The path of a SQLite log holding ``db``: itself, or a copy removed afterwards."""
    if not parse_target(db).remote:
        yield db
        return
    from engine.storage.copy import copy_log  # here: a file, the usual case, needs no copy

    with tempfile.TemporaryDirectory(prefix="foldline-audit-") as folder:
        copy = os.path.join(folder, "copy.db")
        copy_log(db, copy)
        yield copy


def open_any_reader(db: str) -> Reader:
    """A raw reader over ``db`` in place (``engine.audit.open_reader`` for a file)."""
    if check_target(db).remote:  # (a clear error without the extra)
        from engine.audit.postgres_source import open_postgres_reader

        return open_postgres_reader(db)
    return open_reader(db)


@contextlib.contextmanager
def reading(db: str) -> Iterator[Reader]:
    reader = open_any_reader(db)
    try:
        yield reader
    finally:
        reader.close()
