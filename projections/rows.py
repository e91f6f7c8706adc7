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

from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from operator import itemgetter
from typing import Any, TypeVar, cast

import msgspec
import msgspec.inspect

from engine.domain.retention import RetiredRow
from engine.domain.rows import DeliveryRow, JobRow, LeaseRow, PushConfigRow, SessionRow, TaskRow

R = TypeVar("R", bound=msgspec.Struct)

# A hook that started and ended without an exit code: recorded job.notify_lost after a crash
# (a hook killed at its cap records one).
NOTIFY_LOST = "notify_pid IS NOT NULL AND notify_ms IS NOT NULL AND notify_exit_code IS NULL"
# A job's requests for input still waiting for an answer (``projections.channel``).
PENDING_REQUESTS = (
    "(SELECT count(*) FROM requests r WHERE r.job_id = jobs.job_id AND r.state = 'pending')"
)


class Json:
    """A column holding JSON text, decoded."""


class Expression(str):
    """An SQL expression selected as the field."""


class Composed(tuple[str, ...]):
    """An object whose members are these columns, named as the columns' last word
    (``owes_kind`` -> ``kind``) unless ``names`` names them; None when the first column is
    NULL. A column in ``json`` holds JSON text, decoded."""

    names: tuple[str, ...]
    json: frozenset[str]

    def __new__(
        cls,
        columns: tuple[str, ...],
        *,
        names: tuple[str, ...] | None = None,
        json: tuple[str, ...] = (),
    ) -> Composed:
        made = super().__new__(cls, columns)
        made.names = names or tuple(column.rpartition("_")[2] for column in columns)
        made.json = frozenset(json)
        return made


SOURCES: dict[type[msgspec.Struct], dict[str, Json | Expression | Composed]] = {
    LeaseRow: {},
    SessionRow: {"taint_reasons": Json(), "owes": Composed(("owes_kind", "owes_ref"))},
    JobRow: {
        "files": Json(),
        "warnings": Json(),
        "covers": Json(),
        "write_scope": Json(),
        "contract_errors": Json(),
        "notify_lost": Expression(NOTIFY_LOST),
        "pending_requests": Expression(PENDING_REQUESTS),
        "patch": Composed(
            ("patch_sha256", "patch_size", "patch_paths", "patch_base"),
            names=("sha256", "size", "paths", "base_commit"),
            json=("patch_paths",),
        ),
        "integration": Composed(
            ("integration_by", "integration_before", "integration_after", "integration_paths"),
            json=("integration_paths",),
        ),
    },
    TaskRow: {"followups": Json(), "files": Json(), "artifacts": Json(), "reply": Json()},
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
def _reader(row_type: type[R]) -> Callable[[Sequence[Any]], R]:
    """A function of one selected row to ``row_type``, made once per row type: built straight
    from the row's values where every field is text, a number, a flag or JSON (the entities'
    rows, read on every command the rules decide), converted by msgspec otherwise."""
    return _building_reader(row_type) or _converting_reader(row_type)


_PLAIN = (msgspec.inspect.StrType, msgspec.inspect.IntType, msgspec.inspect.NoneType)
_FLAG = {msgspec.inspect.BoolType, msgspec.inspect.NoneType}


def _building_reader(row_type: type[R]) -> Callable[[Sequence[Any]], R] | None:
    """The row type made with one call, its arguments picked from the row by generated code
    (SQLite's 0/1 made a flag, JSON text decoded to the field's type); None when a field needs
    more than that, such as a number stored as text."""
    sources = SOURCES.get(row_type, {})
    info = msgspec.inspect.type_info(row_type)
    assert isinstance(info, msgspec.inspect.StructType)
    types = {f.name: f.type for f in msgspec.structs.fields(row_type)}
    scope: dict[str, Any] = {
        "row_type": row_type,
        "convert": msgspec.convert,
        "json_decode": msgspec.json.decode,
    }
    arguments, at = [], 0
    for field in info.fields:
        name, kinds = field.name, _kinds(field.type)
        source = sources.get(name)
        if isinstance(source, Composed):
            scope[f"t_{name}"] = types[name]
            members = ", ".join(
                f"{member!r}: "
                + (f"json_decode(row[{at + i}])" if column in source.json else f"row[{at + i}]")
                for i, (column, member) in enumerate(zip(source, source.names, strict=True))
            )
            value = f"None if row[{at}] is None else convert({{{members}}}, t_{name})"
            at += len(source)
        elif isinstance(source, Json):
            scope[f"d_{name}"] = msgspec.json.Decoder(types[name]).decode
            value, at = f"d_{name}(row[{at}])", at + 1
        elif msgspec.inspect.BoolType in kinds and kinds <= _FLAG:
            flag = f"bool(row[{at}])"
            optional = msgspec.inspect.NoneType in kinds
            value, at = (f"None if row[{at}] is None else {flag}" if optional else flag), at + 1
        elif all(issubclass(kind, _PLAIN) for kind in kinds):
            value, at = f"row[{at}]", at + 1
        else:
            return None
        arguments.append(f"{name}={value}")
    code = f"def read(row):\n    return row_type({', '.join(arguments)})\n"
    exec(compile(code, f"<read {row_type.__name__}>", "exec"), scope)
    return cast(Callable[[Sequence[Any]], R], scope.pop("read"))


def _kinds(info: msgspec.inspect.Type) -> set[type[msgspec.inspect.Type]]:
    """The kinds of type a field may hold: its own, or each member's of a union."""
    if isinstance(info, msgspec.inspect.UnionType):
        return {type(member) for member in info.types}
    return {type(info)}


def _converting_reader(row_type: type[R]) -> Callable[[Sequence[Any]], R]:
    """The plain columns picked at once, the JSON and composed ones read after, and msgspec
    converting the whole (strict=False: SQLite stores booleans as 0/1)."""
    sources = SOURCES.get(row_type, {})
    plain: list[tuple[str, int]] = []
    json_text: list[tuple[str, int]] = []
    composed: list[tuple[str, int, Composed]] = []
    at = 0
    for name in row_type.__struct_fields__:
        source = sources.get(name)
        if isinstance(source, Composed):
            composed.append((name, at, source))
            at += len(source)
            continue
        (json_text if isinstance(source, Json) else plain).append((name, at))
        at += 1
    names = tuple(name for name, _ in plain)
    pick = _picker(tuple(at for _, at in plain))
    json_decode = msgspec.json.decode
    convert = msgspec.convert

    def read(row: Sequence[Any]) -> R:
        found = dict(zip(names, pick(row), strict=True))
        for name, at in json_text:
            found[name] = json_decode(row[at])
        for name, at, source in composed:
            found[name] = (
                None
                if row[at] is None
                else {
                    member: json_decode(value) if column in source.json else value
                    for column, member, value in zip(
                        source, source.names, row[at : at + len(source)], strict=True
                    )
                }
            )
        return convert(found, row_type, strict=False)

    return read


def _picker(indexes: tuple[int, ...]) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """The values at ``indexes`` of a row, as a sequence (``itemgetter`` of one is a scalar)."""
    if not indexes:
        return lambda row: ()
    if len(indexes) == 1:
        only = indexes[0]
        return lambda row: (row[only],)
    return itemgetter(*indexes)


def decode(row_type: type[R], rows: Sequence[Sequence[Any]]) -> list[R]:
    """``rows`` selected with ``columns(row_type)``, as ``row_type``."""
    read = _reader(row_type)
    return [read(row) for row in rows]


def select(conn: Any, row_type: type[R], where: str, *params: Any) -> list[R]:
    """``SELECT <row_type's columns> FROM <its table> <where>``, decoded."""
    return decode(row_type, conn.execute(_select_sql(row_type, where), params).fetchall())


def select_one(conn: Any, row_type: type[R], where: str, *params: Any) -> R | None:
    rows = conn.execute(_select_sql(row_type, where), params).fetchall()
    return _reader(row_type)(rows[0]) if rows else None


@lru_cache(maxsize=256)
def _select_sql(row_type: type[msgspec.Struct], where: str) -> str:
    # Bounded: a few callers build ``where`` with one mark per parameter.
    return f"SELECT {columns(row_type)} FROM {TABLES[row_type]} {where}"


TABLES: dict[type[msgspec.Struct], str] = {
    LeaseRow: "leases",
    SessionRow: "sessions",
    JobRow: "jobs",
    TaskRow: "tasks",
    PushConfigRow: "push_configs",
    DeliveryRow: "push_outbox",
    RetiredRow: "retired",
}
