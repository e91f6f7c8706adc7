"""The one way a read-model row becomes its row type: which SQL each field is selected as, and
how the selected values are decoded.

Every reader (``projections.queries``, the domain's ``projections.view``, the console) selects
with ``columns(Row)`` and decodes with ``decode(Row, rows)``, so a field added to a row type
and its table is read everywhere at once. A field is its column of the same name unless the
row's entry in ``SOURCES`` says otherwise: an SQL expression, a column of JSON text, or an
object made of several columns (None when the first is NULL). A read of something that is no
entity's row (a count per state, the chain's head) decodes the same way, its fields being the
columns of its SELECT in order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

import msgspec

from engine.domain.rows import JobRow, LeaseRow, SessionRow, TaskRow

R = TypeVar("R", bound=msgspec.Struct)

# A hook that started and ended without an exit code: recorded job.notify_lost after a crash
# (a hook killed at its cap records one).
NOTIFY_LOST = "notify_pid IS NOT NULL AND notify_ms IS NOT NULL AND notify_exit_code IS NULL"


class Json:
    """A column holding JSON text, decoded."""


class Expression(str):
    """An SQL expression selected as the field."""


class Composed(tuple[str, ...]):
    """An object whose members are these columns, named as the columns' last word
    (``owes_kind`` -> ``kind``); None when the first column is NULL."""


SOURCES: dict[type[msgspec.Struct], dict[str, Json | Expression | Composed]] = {
    LeaseRow: {},
    SessionRow: {"taint_reasons": Json(), "owes": Composed(("owes_kind", "owes_ref"))},
    JobRow: {
        "files": Json(),
        "warnings": Json(),
        "write_scope": Json(),
        "notify_lost": Expression(NOTIFY_LOST),
    },
    TaskRow: {"followups": Json()},
}


@cache
def columns(row_type: type[msgspec.Struct]) -> str:
    """The SELECT list of ``row_type``: one entry per column its fields are read from."""
    sources = SOURCES.get(row_type, {})
    selected = []
    for name in row_type.__struct_fields__:
        source = sources.get(name)
        if isinstance(source, Expression):
            selected.append(f"{source} AS {name}")
        elif isinstance(source, Composed):
            selected.extend(source)
        else:
            selected.append(name)
    return ", ".join(selected)


Reader = Callable[[Sequence[Any]], Any]


@cache
def _readers(row_type: type[msgspec.Struct]) -> tuple[tuple[str, Reader], ...]:
    sources = SOURCES.get(row_type, {})
    readers: list[tuple[str, Reader]] = []
    at = 0
    for name in row_type.__struct_fields__:
        source = sources.get(name)
        if isinstance(source, Composed):
            members = tuple(column.rpartition("_")[2] for column in source)
            readers.append((name, _composed(at, members)))
            at += len(source)
            continue
        readers.append((name, _json(at) if isinstance(source, Json) else _plain(at)))
        at += 1
    return tuple(readers)


def _plain(at: int) -> Reader:
    return lambda row: row[at]


def _json(at: int) -> Reader:
    return lambda row: json.loads(row[at])


def _composed(at: int, members: tuple[str, ...]) -> Reader:
    def read(row: Sequence[Any]) -> Any:
        if row[at] is None:
            return None
        return dict(zip(members, row[at : at + len(members)], strict=True))

    return read


def decode(row_type: type[R], rows: Sequence[Sequence[Any]]) -> list[R]:
    """``rows`` selected with ``columns(row_type)``, as ``row_type``."""
    readers = _readers(row_type)
    found = [{name: read(row) for name, read in readers} for row in rows]
    # strict=False: SQLite stores booleans as 0/1.
    return msgspec.convert(found, list[row_type], strict=False)  # type: ignore[valid-type]


def select(conn: Any, row_type: type[R], where: str, *params: Any) -> list[R]:
    """``SELECT <row_type's columns> FROM <its table> <where>``, decoded."""
    sql = f"SELECT {columns(row_type)} FROM {TABLES[row_type]} {where}"
    return decode(row_type, conn.execute(sql, params).fetchall())


def select_one(conn: Any, row_type: type[R], where: str, *params: Any) -> R | None:
    found = select(conn, row_type, where, *params)
    return found[0] if found else None


TABLES: dict[type[msgspec.Struct], str] = {
    LeaseRow: "leases",
    SessionRow: "sessions",
    JobRow: "jobs",
    TaskRow: "tasks",
}
