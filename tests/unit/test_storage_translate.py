"""Each backend names a full disk ``storage_full`` and any other storage fault
``storage_error``, in its one ``translate``."""

from __future__ import annotations

import apsw
from psycopg import errors as pg_errors

from engine.errors import StorageError, StorageFull
from engine.storage.postgres import storage as postgres_storage
from engine.storage.sqlite import storage as sqlite_storage


def test_translate_names_a_full_disk_storage_full_on_sqlite_and_postgresql() -> None:
    full = sqlite_storage.translate(apsw.FullError("database or disk is full"))
    assert isinstance(full, StorageFull) and full.code == "storage_full"
    assert "database or disk is full" in str(full)
    pg_full = postgres_storage.translate(pg_errors.DiskFull("could not extend file"))
    assert isinstance(pg_full, StorageFull) and "could not extend file" in str(pg_full)


def test_translate_keeps_other_faults_storage_error() -> None:
    for fault in (
        sqlite_storage.translate(apsw.IOError("disk I/O error")),
        postgres_storage.translate(pg_errors.AdminShutdown("terminating connection")),
    ):
        assert type(fault) is StorageError and fault.code == "storage_error"
