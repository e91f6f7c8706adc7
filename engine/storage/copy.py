"""Copy a log between backends, with its chain, its commands and its read models.

``foldline copy SRC DST`` and the audits of a PostgreSQL log use this: SRC and DST are each a
SQLite file or a ``postgresql://`` URL. Every row is copied as stored (positions, hashes,
epochs, payload bytes), so the copy's chain is the source's chain and ``foldline diff`` finds
the two identical. The tables are the log's own (``events``, ``commands``, ``projections``,
``tree_nodes``) and every other table the source holds (the read models, ``streams`` first
among them), made in the target from the source's columns, keys and indexes, in SQLite's
dialect (which the PostgreSQL backend translates, ``engine.storage.postgres.dialect``).

The copy is one write transaction on the target, so a failed copy leaves it empty; the target
must be new or an empty log. The source is opened read-only, at the newest schema or the one
before it (which only lacks the derived ``tree_nodes``: the copy then has none).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine import chain
from engine.clock import SystemClock, format_time
from engine.errors import InvalidArgument
from engine.merkle.nodes import SCHEMA as NODES_SCHEMA
from engine.storage import Storage, Target, open_storage, parse_target

# The tables every log has, made by the target's own migrations (``head`` is PostgreSQL's).
BASE = ("schema_migrations", "events", "commands", "projections", "head", "tree_nodes")
# The oldest source copied: migration 2 only added the derived tree nodes, made again lazily.
OLDEST_SOURCE = 1
PAGE = 5000
# The events in the order of their table's columns, which ``Writer.insert_events`` takes.
_EVENTS_PAGE = "SELECT * FROM events WHERE position > ? ORDER BY position LIMIT ?"
_PG_TYPES = {
    "bigint": "INTEGER",
    "integer": "INTEGER",
    "smallint": "INTEGER",
    "boolean": "INTEGER",
    "text": "TEXT",
    "character varying": "TEXT",
    "json": "TEXT",
    "jsonb": "TEXT",
    "bytea": "BLOB",
    "double precision": "REAL",
    "real": "REAL",
    "numeric": "REAL",
}


@dataclass(frozen=True)
class Table:
    """A read-model table of the source: its DDL in SQLite's dialect, columns and indexes."""

    name: str
    ddl: str
    columns: tuple[str, ...]
    indexes: tuple[str, ...] = ()


@dataclass
class CopyReport:
    source: str
    target: str
    events: int = 0
    tables: dict[str, int] = field(default_factory=dict)
    chain_ok: bool = True


def _tables_sqlite(storage: Storage) -> list[Table]:
    conn = storage.connection()
    found = conn.execute(
        "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name"
    ).fetchall()
    tables = []
    for name, ddl in found:
        if name in BASE:
            continue
        columns = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({name})").fetchall())
        indexes = tuple(
            r[0]
            for r in conn.execute(
                "SELECT sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?"
                " AND sql IS NOT NULL ORDER BY name",
                (name,),
            ).fetchall()
        )
        tables.append(Table(name, ddl, columns, indexes))
    return tables


def _tables_postgres(storage: Any) -> list[Table]:
    conn = storage.connection().raw
    schema = storage.schema
    names = [
        r[0]
        for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            " AND table_type = 'BASE TABLE' ORDER BY table_name",
            (schema,),
        ).fetchall()
        if r[0] not in BASE
    ]
    tables = []
    for name in names:
        columns = conn.execute(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (schema, name),
        ).fetchall()
        keys = [
            r[0]
            for r in conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
                " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
                " ORDER BY array_position(i.indkey, a.attnum)",
                (f"{schema}.{name}",),
            ).fetchall()
        ]
        parts = [
            f"{column} {_PG_TYPES.get(kind, 'TEXT')}{'' if nullable == 'YES' else ' NOT NULL'}"
            for column, kind, nullable in columns
        ]
        if keys:
            parts.append(f"PRIMARY KEY ({', '.join(keys)})")
        indexes = tuple(
            _sqlite_index(r[0], schema)
            for r in conn.execute(
                "SELECT indexdef FROM pg_indexes x WHERE schemaname = %s AND tablename = %s"
                " AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indexrelid ="
                " (quote_ident(x.schemaname) || '.' || quote_ident(x.indexname))::regclass"
                " AND i.indisprimary) ORDER BY indexname",
                (schema, name),
            ).fetchall()
        )
        ddl = f"CREATE TABLE {name} ({', '.join(parts)})"
        tables.append(Table(name, ddl, tuple(c[0] for c in columns), indexes))
    return tables


def _sqlite_index(definition: str, schema: str) -> str:
    """PostgreSQL's ``CREATE INDEX n ON s.t USING btree (a, b)`` in SQLite's words."""
    text = definition.replace(f" ON {schema}.", " ON ")
    text = re.sub(r"\s+USING\s+btree\s*", " ", text)
    return re.sub(r'\s+COLLATE\s+"C"', "", text)


def _tables(storage: Storage, target: Target) -> list[Table]:
    if target.remote:
        return _tables_postgres(storage)
    return _tables_sqlite(storage)


def _events(read: Any) -> Iterator[list[Any]]:
    """The source's events, a page at a time, through the snapshot cursor ``read``."""
    after = 0
    while True:
        rows = [tuple(row) for row in read.execute(_EVENTS_PAGE, (after, PAGE)).fetchall()]
        if not rows:
            return
        yield rows
        after = rows[-1][0]


def copy_log(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> CopyReport:
    """Copy the log at ``source`` into the new (or empty) log at ``target``.

    Raises:
        NotALog, NeedsMigration: the source is not a current foldline log.
        InvalidArgument: the target already holds events or tables.
        StorageError: either database failed.
    """
    src_target, dst_target = parse_target(source).absolute(), parse_target(target).absolute()
    src = open_storage(src_target, readonly=True)
    dst: Storage | None = None
    try:
        schema = src.check_current({}, oldest=OLDEST_SOURCE)
        tables = _tables(src, src_target)
        dst = open_storage(dst_target, readonly=False)
        dst.migrate(format_time(SystemClock().now()))
        if dst.max_position() != 0 or _tables(dst, dst_target):
            raise InvalidArgument(f"{dst.path}: the target must be a new or empty log")
        report = CopyReport(src.path, dst.path)
        # One read snapshot of the source for everything copied: a server appending, or
        # extending the tree nodes, meanwhile changes nothing the copy holds.
        with src.content_cursor() as read:
            _copy(read, dst, tables, report, nodes=schema >= NODES_SCHEMA)
        # The copy's chain, checked from its own rows, is the news: it must be the source's.
        report.chain_ok = not list(chain.check_rows(dst.rows_after(0), chain.GENESIS, 0))
        return report
    finally:
        src.close()
        if dst is not None:
            dst.close()


def _copy(read: Any, dst: Storage, tables: list[Table], report: CopyReport, nodes: bool) -> None:
    writer = dst.writer()
    writer.begin()
    try:
        cursor = writer.cursor
        for rows in _events(read):
            writer.insert_events(rows)
            report.events += len(rows)
        commands = read.execute(
            "SELECT command_id, stream_id, first_position, last_position FROM commands"
        ).fetchall()
        writer.insert_commands([tuple(r) for r in commands])
        cursor.executemany(
            "INSERT INTO projections VALUES (?, ?, ?)",
            [tuple(r) for r in read.execute("SELECT name, version, checkpoint FROM projections")],
        )
        # The stored tree nodes are derived, but copied as they are: the copy's proofs stay
        # fast, and verifying the copy checks the source's nodes too.
        if nodes:  # an older source has none: the copy's holder or readers make them
            cursor.executemany(
                "INSERT INTO tree_nodes (level, idx, hash) VALUES (?, ?, ?)",
                [tuple(r) for r in read.execute("SELECT level, idx, hash FROM tree_nodes")],
            )
        for table in tables:
            cursor.execute(table.ddl)
            for index in table.indexes:
                cursor.execute(index)
            columns = ", ".join(table.columns)
            rows = [tuple(r) for r in read.execute(f"SELECT {columns} FROM {table.name}")]
            marks = ", ".join("?" for _ in table.columns)
            cursor.executemany(f"INSERT INTO {table.name} ({columns}) VALUES ({marks})", rows)
            report.tables[table.name] = len(rows)
        writer.commit()
    except BaseException:
        with contextlib.suppress(Exception):
            writer.rollback()
        raise


__all__ = ["CopyReport", "copy_log"]
