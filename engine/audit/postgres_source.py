"""The raw audit commands (history, state, export, tail) on a log in PostgreSQL.

``engine.audit.source.Reader`` reads rows through the log's read connection with SQLite's SQL,
which the PostgreSQL backend translates (``engine.storage.postgres.dialect``), so a reader
over a read-only ``PostgresStorage`` serves those commands unchanged. The audits that need
SQLite itself (verify refolds into an attached scratch database; diff joins two attached logs;
checkpoints) read a SQLite copy made by ``engine.storage.copy`` instead.
"""

from __future__ import annotations

from engine.audit.source import Reader
from engine.clock import SystemClock
from engine.errors import NotALog, SchemaTooNew
from engine.log import Log
from engine.machines import Machines
from engine.projection import ProjectionSet
from engine.storage.postgres.schema import LATEST
from engine.storage.postgres.storage import PostgresStorage


def open_postgres_reader(url: str) -> Reader:
    """Open a PostgreSQL log read-only, without machines or projections.

    Raises:
        NotALog: no foldline log in the URL's schema.
        SchemaTooNew: written by a newer release.
        StorageError: the server could not be reached or read.
    """
    storage = PostgresStorage(url, readonly=True)
    log = Log(storage, Machines([]), ProjectionSet([]), SystemClock(), 1 << 20, 1)
    try:
        schema = storage.applied()
        if schema == 0:
            raise NotALog(f"{storage.path}: no foldline log in schema {storage.schema}")
        if schema > LATEST:
            raise SchemaTooNew(storage.path, schema, LATEST)
    except BaseException:
        log.close()
        raise
    return Reader(storage.path, log, schema)
