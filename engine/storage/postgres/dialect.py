"""SQLite's dialect, as the projections and domain views write it, run on PostgreSQL.

The seam hands projections and domain views a DB-API cursor that takes ``?`` placeholders and
SQLite's SQL (ADR 0022). Rather than a second copy of every read model, the PostgreSQL backend
wraps its psycopg cursors and connections in ``PgCursor``/``PgConnection``, which rewrite each
statement once (cached by its text) into PostgreSQL's dialect:

- ``?`` placeholders outside quotes become ``%s``, and every literal ``%`` becomes ``%%``;
- DDL: ``WITHOUT ROWID`` is dropped, ``INTEGER`` is ``BIGINT`` (SQLite's integers are 64-bit),
  ``BLOB`` is ``BYTEA``, ``REAL`` is ``DOUBLE PRECISION``, and ``TEXT`` columns collate as
  ``"C"``: byte order, as SQLite compares, so ``ORDER BY`` and content hashes agree;
- ``INSERT OR REPLACE`` / ``INSERT OR IGNORE`` become ``ON CONFLICT`` on the table's primary key;
- ``PRAGMA table_info(t)`` lists the table's columns from the catalog.

SQLite's scalar functions the read models use and PostgreSQL lacks (``instr``, ``json_insert``
with ``'$[#]'``, ``json_array`` as ``foldline_json_array``) are SQL functions, with SQLite's
compact JSON text, created in each log's schema by its
migrations (``engine.storage.postgres.storage``). A statement this module cannot translate is run as
written, so PostgreSQL's own error names it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

_QUOTED = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")
_DDL = re.compile(r"^\s*(CREATE|ALTER)\s+TABLE", re.IGNORECASE)
_WITHOUT_ROWID = re.compile(r"\)\s*WITHOUT\s+ROWID", re.IGNORECASE)
# A type follows its column's name (a column may itself be called ``text``).
_TYPES = (
    (re.compile(r"(?<=\w)(\s+)INTEGER\b", re.IGNORECASE), r"\1BIGINT"),
    (re.compile(r"(?<=\w)(\s+)BLOB\b", re.IGNORECASE), r"\1BYTEA"),
    (re.compile(r"(?<=\w)(\s+)REAL\b", re.IGNORECASE), r"\1DOUBLE PRECISION"),
    (re.compile(r"(?<=\w)(\s+)TEXT\b", re.IGNORECASE), r'\1TEXT COLLATE "C"'),
)
_JSON_ARRAY = re.compile(r"\bjson_array\s*\(", re.IGNORECASE)
_INSERT_OR = re.compile(r"^\s*INSERT\s+OR\s+(REPLACE|IGNORE)\s+INTO\s+(\w+)", re.IGNORECASE)
_PRAGMA_TABLE_INFO = re.compile(r"^\s*PRAGMA\s+table_info\((\w+)\)\s*$", re.IGNORECASE)
_COLUMNS_SQL = (
    "SELECT ordinal_position - 1, column_name FROM information_schema.columns"
    " WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position"
)
_KEY_SQL = (
    "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
    " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
)


def _outside_quotes(sql: str, change: Callable[[str], str]) -> str:
    """Apply ``change`` to the parts of ``sql`` that are not quoted literals or names."""
    parts = _QUOTED.split(sql)
    return "".join(part if i % 2 else change(part) for i, part in enumerate(parts))


def _placeholders(part: str) -> str:
    return part.replace("?", "%s")


def _functions(part: str) -> str:
    return _JSON_ARRAY.sub("foldline_json_array(", part)


def _ddl(part: str) -> str:
    part = _WITHOUT_ROWID.sub(")", part)
    for pattern, replacement in _TYPES:
        part = pattern.sub(replacement, part)
    return part


class Dialect:
    """Statement translation for one log's schema (primary keys are looked up once)."""

    def __init__(self) -> None:
        self._plain: dict[str, str] = {}
        self._bound: dict[str, str] = {}
        self._keys: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def forget_keys(self) -> None:
        """After DDL: a table may have been dropped and made anew with another key."""
        with self._lock:
            self._keys.clear()
            self._plain = {s: t for s, t in self._plain.items() if not _INSERT_OR.match(s)}
            self._bound = {s: t for s, t in self._bound.items() if not _INSERT_OR.match(s)}

    def translate(self, raw: Any, sql: str, bound: bool) -> str:
        """``sql`` in PostgreSQL's dialect; ``bound``: it will be sent with parameters."""
        cache = self._bound if bound else self._plain
        done = cache.get(sql)
        if done is None:
            done = self._translate(raw, sql, bound)
            with self._lock:
                cache[sql] = done
        return done

    def _translate(self, raw: Any, sql: str, bound: bool) -> str:
        text = _outside_quotes(sql, _functions)
        if _DDL.match(text):
            text = _outside_quotes(text, _ddl)
        match = _INSERT_OR.match(text)
        if match:
            text = self._insert_or(raw, text, match)
        if bound:
            # psycopg reads every ``%`` as a placeholder's start, quoted or not.
            text = _outside_quotes(text.replace("%", "%%"), _placeholders)
        return text

    def _insert_or(self, raw: Any, sql: str, match: re.Match[str]) -> str:
        action, table = match.group(1).upper(), match.group(2)
        rest = sql[match.end() :]
        head = f"INSERT INTO {table}"
        if action == "IGNORE":
            return f"{head}{rest} ON CONFLICT DO NOTHING"
        keys = self._primary_key(raw, table)
        columns = [name for _, name in raw.execute(_COLUMNS_SQL, (table,)).fetchall()]
        others = [c for c in columns if c not in keys]
        if not keys:
            return sql  # no key to replace on: PostgreSQL's error will say so
        update = (
            "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in others)
            if others
            else "DO NOTHING"
        )
        return f"{head}{rest} ON CONFLICT ({', '.join(keys)}) {update}"

    def _primary_key(self, raw: Any, table: str) -> list[str]:
        keys = self._keys.get(table)
        if keys is None:
            keys = [row[0] for row in raw.execute(_KEY_SQL, (table,)).fetchall()]
            self._keys[table] = keys
        return keys


class PgCursor:
    """A psycopg cursor that takes SQLite's dialect (``?`` placeholders), apsw-style: ``execute``
    returns the cursor, which iterates over the rows (none for a statement without a result)."""

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self._raw = raw
        self._dialect = dialect

    @property
    def raw(self) -> Any:
        """The psycopg cursor underneath (the backend's own SQL, in PostgreSQL's dialect)."""
        return self._raw

    def execute(self, sql: str, params: Sequence[Any] | None = ()) -> PgCursor:
        table_info = _PRAGMA_TABLE_INFO.match(sql)
        if table_info:
            self._raw.execute(_COLUMNS_SQL, (table_info.group(1),))
            return self
        if params:
            self._raw.execute(self._dialect.translate(self._raw, sql, True), params)
        else:
            self._raw.execute(self._dialect.translate(self._raw, sql, False))
            if _DDL.match(sql) or sql.lstrip()[:4].upper() == "DROP":
                self._dialect.forget_keys()
        return self

    def executemany(self, sql: str, seq: Any) -> PgCursor:
        rows = list(seq)
        if rows:
            self._raw.executemany(self._dialect.translate(self._raw, sql, True), rows)
        return self

    def fetchall(self) -> list[Any]:
        if self._raw.description is None:
            return []
        rows: list[Any] = self._raw.fetchall()
        return rows

    def fetchone(self) -> Any:
        if self._raw.description is None:
            return None
        return self._raw.fetchone()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class PgConnection:
    """A psycopg connection that takes SQLite's dialect: ``execute`` and ``cursor`` as apsw's."""

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self.raw = raw
        self._dialect = dialect

    def cursor(self) -> PgCursor:
        return PgCursor(self.raw.cursor(), self._dialect)

    def execute(self, sql: str, params: Sequence[Any] | None = ()) -> PgCursor:
        return self.cursor().execute(sql, params)

    def executemany(self, sql: str, seq: Any) -> PgCursor:
        return self.cursor().executemany(sql, seq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)
