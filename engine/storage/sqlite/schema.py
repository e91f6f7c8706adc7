"""The log's SQL schema as numbered migrations, and the code that applies them.

Each migration is applied once, in order, inside one ``BEGIN IMMEDIATE`` transaction, and
recorded in ``schema_migrations``. A file whose newest recorded migration is unknown to this
release is refused (``SchemaTooNew``) before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.errors import NotALog, SchemaTooNew
from engine.storage.seam import Migration

APPLICATION_ID = 0x666F6C64  # "fold": marks a SQLite file as a foldline log


_APPEND_ONLY = """
CREATE TRIGGER {table}_refuse_update BEFORE UPDATE ON {table}
BEGIN SELECT RAISE(ABORT, 'foldline: {table} is append-only'); END;
CREATE TRIGGER {table}_refuse_delete BEFORE DELETE ON {table}
BEGIN SELECT RAISE(ABORT, 'foldline: {table} is append-only'); END;
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "events, commands and projection checkpoints",
        """
        CREATE TABLE events (
            position    INTEGER PRIMARY KEY,
            stream_id   TEXT    NOT NULL,
            version     INTEGER NOT NULL CHECK (version >= 1),
            event_type  TEXT    NOT NULL,
            recorded_at TEXT    NOT NULL,
            epoch       INTEGER NOT NULL CHECK (epoch >= 0),
            command_id  TEXT,
            state       TEXT    NOT NULL,
            payload     BLOB    NOT NULL,
            hash        BLOB    NOT NULL,
            UNIQUE (stream_id, version)
        );
        CREATE TABLE commands (
            command_id     TEXT    PRIMARY KEY,
            stream_id      TEXT    NOT NULL,
            first_position INTEGER NOT NULL,
            last_position  INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE projections (
            name       TEXT    PRIMARY KEY,
            version    INTEGER NOT NULL,
            checkpoint INTEGER  -- NULL: applied up to the head
        ) WITHOUT ROWID;
        """
        + _APPEND_ONLY.format(table="events")
        + _APPEND_ONLY.format(table="commands"),
    ),
    Migration(
        2,
        "stored interior nodes of the Merkle tree",
        # Derived from the chain hashes (engine.merkle.nodes): node (level, idx) is the head of
        # the complete aligned subtree over leaves [idx << level, (idx + 1) << level).
        """
        CREATE TABLE tree_nodes (
            level INTEGER NOT NULL,
            idx   INTEGER NOT NULL,
            hash  BLOB    NOT NULL,
            PRIMARY KEY (level, idx)
        ) WITHOUT ROWID;
        """,
    ),
)

LATEST = MIGRATIONS[-1].number


def _applied(conn: Any) -> int:
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
    if not tables:
        return 0
    app_id = conn.execute("PRAGMA application_id").fetchall()[0][0]
    if "schema_migrations" not in tables or app_id != APPLICATION_ID:
        raise NotALog("the file is a SQLite database, but not a foldline log")
    row = conn.execute("SELECT max(number) FROM schema_migrations").fetchall()[0]
    return int(row[0] or 0)


def migrate(
    conn: Any, path: str, recorded_at: str, migrations: Sequence[Migration] = MIGRATIONS
) -> int:
    """Bring the file to the newest schema; returns the schema number it is now at.

    Raises:
        SchemaTooNew: the file records a migration newer than ``migrations`` knows.
        NotALog: the file holds tables but is not a foldline log.
    """
    latest = migrations[-1].number
    current = _applied(conn)
    if current > latest:
        raise SchemaTooNew(path, current, latest)
    if current == latest:
        return current
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = _applied(conn)  # another process may have migrated while we waited
        if current > latest:
            raise SchemaTooNew(path, current, latest)
        if current == 0:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(
                "CREATE TABLE schema_migrations (number INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                " applied_at TEXT NOT NULL)"
            )
        for migration in migrations:
            if migration.number > current:
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                    (migration.number, migration.name, recorded_at),
                )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return latest
