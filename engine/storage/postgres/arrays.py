"""A batch's columns as PostgreSQL array literals, built here as one string each.

A batch's rows go to the server as ``INSERT ... SELECT FROM unnest(%s::bigint[], ...)``: one
statement, whatever the number of rows (``engine.storage.postgres.storage``). psycopg adapts a list
parameter element by element in Python; building the literal with ``str.join`` is about a
third of that cost on the client (ADR 0026), the hot path's largest share, and the server
parses it as fast. Each literal is sent as one text parameter and cast by the statement.

The text form (PostgreSQL's "Arrays", "Array Value Input"): ``{a,b}``; an element in double
quotes may hold anything but an unescaped ``"`` or ``\\``, so every text element is quoted and
those two are backslash-escaped; an unquoted ``NULL`` is SQL NULL; a ``bytea`` element is its
hex form ``\\x...`` (its backslash escaped in turn).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def _quoted(text: str | None) -> str:
    if text is None:
        return "NULL"
    if "\\" in text or '"' in text:
        text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _bytea(data: bytes | None) -> str:
    return "NULL" if data is None else f'"\\\\x{data.hex()}"'


def bigints(column: Sequence[int]) -> str:
    """``{1,2,3}``: a ``bigint[]`` literal (the values are Python ints, never text)."""
    return "{" + ",".join(map(str, map(int, column))) + "}"


def texts(column: Sequence[str | None]) -> str:
    """A ``text[]`` literal; None is NULL.

    The usual column (ids, types, times: no NULL, no quote, no backslash) is joined whole,
    without a Python call per element; any other is quoted element by element."""
    if not column:
        return "{}"
    if None not in column:
        joined = "".join(column)  # type: ignore[arg-type]  # (no None, checked above)
        if '"' not in joined and "\\" not in joined:
            return '{"' + '","'.join(column) + '"}'  # type: ignore[arg-type]
    elif column.count(None) == len(column):
        return "{" + ",".join(["NULL"] * len(column)) + "}"
    return "{" + ",".join(map(_quoted, column)) + "}"


def byteas(column: Sequence[bytes | None]) -> str:
    """A ``bytea[]`` literal; None is NULL."""
    if column and None not in column:
        return '{"\\\\x' + '","\\\\x'.join(map(bytes.hex, column)) + '"}'  # type: ignore[arg-type]
    return "{" + ",".join(map(_bytea, column)) + "}"


def columns(rows: Sequence[Sequence[Any]], kinds: Sequence[Callable[[Any], str]]) -> list[str]:
    """Each column of ``rows`` as the literal of its kind (``bigints``, ``texts``, ``byteas``)."""
    return [kind(column) for kind, column in zip(kinds, zip(*rows, strict=True), strict=True)]
