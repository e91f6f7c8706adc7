"""How ``verify`` compares a worker's refold with the stored read models, in the read
transaction of its scan.

Two ways, one answer per projection: ``(rows of the refold not stored exactly so, rows of the
refold, rows stored)``, summed over tables. A refold written into the worker's scratch database
(a projection without rows of its own in memory) is loaded next to the stored tables and SQLite
joins them on the primary key. A refold kept in memory (``Folder.rows``) is compared with the
stored table narrowed to the worker's share of the keys, without being written anywhere first:
both read in key order and compared pair by pair, in C, which proves them equal or proves
nothing; then key by key, value by value, which decides what is counted as differing.

Over all workers, the stored tables equal the refold when no refolded row is missing or
different and as many rows are stored as refolded. With the in-memory way that holds because
the shares of the keys are disjoint (a function of the key's value): each stored row is matched
by one worker at most, so as many matches as stored rows is a one-to-one match.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from operator import eq
from typing import Any

Compared = tuple[int, int, int]


def share_of(column: str, parts: int) -> str:
    """A SQL condition putting ``column``'s value in one of ``parts`` shares (``?1`` is the
    share). It reads the last two characters of ``:`` and the value only (cheap for SQLite),
    which end in the entity's id: the events of ``order:o7`` and ``invoice:o7`` (a read model
    may fold both into one row for ``o7``) and that row's key ``o7`` all land in one share, and
    so do ``order:a`` and ``a``."""
    if parts == 1:
        return "1"
    text = f"(':' || {column})"
    return (
        f"(coalesce(unicode(substr({text}, -1)), 0)"
        f" + 7 * coalesce(unicode(substr({text}, -2, 1)), 0)) % {parts} = ?1"
    )


def differing_rows(conn: Any, table: str) -> int:
    """How many rows of ``fold.<table>`` (a worker's refold) are not in the stored table with
    the same content, joined on the primary key (one B-tree search per row, in SQLite)."""
    columns = conn.execute(f"PRAGMA fold.table_info({table})").fetchall()
    names = [f'"{c[1]}"' for c in columns]
    keys = [f'"{c[1]}"' for c in sorted(columns, key=lambda c: c[5]) if c[5]]
    if not keys:  # no primary key: a set difference
        listed = ", ".join(names)
        sql = (
            f"SELECT count(*) FROM (SELECT {listed} FROM fold.{table}"
            f" EXCEPT SELECT {listed} FROM main.{table})"
        )
    else:
        on = " AND ".join(f"m.{k} = f.{k}" for k in keys)
        different = " OR ".join(f"m.{n} IS NOT f.{n}" for n in names)
        sql = (
            f"SELECT count(*) FROM fold.{table} f LEFT JOIN main.{table} m ON {on}"
            f" WHERE m.{keys[0]} IS NULL OR {different}"
        )
    return int(conn.execute(sql).fetchall()[0][0])


def compare_image(
    conn: Any, image: bytes, tables: Mapping[str, Sequence[str]]
) -> dict[str, Compared]:
    """Load a scratch database (``image``, serialized) as ``fold`` beside the stored tables and
    let SQLite compare each projection's ``tables``."""
    return _compare_loaded(
        conn,
        image,
        tables,
        lambda table, _: conn.execute(f"SELECT count(*) FROM main.{table}").fetchall()[0][0],
    )


def _compare_loaded(
    conn: Any,
    image: bytes,
    tables: Mapping[str, Sequence[str]],
    stored_rows: Callable[[str, int], int],
) -> dict[str, Compared]:
    """``image`` loaded as ``fold``; per projection, its rows differing from the stored ones,
    its rows, and ``stored_rows(table, rows of the refold)`` summed over ``tables``."""
    conn.deserialize("fold", image)
    compared = {}
    for name, names in tables.items():
        differing = folded = stored = 0
        for table in names:
            differing += differing_rows(conn, table)
            in_fold = conn.execute(f"SELECT count(*) FROM fold.{table}").fetchall()[0][0]
            folded += in_fold
            stored += stored_rows(table, in_fold)
        compared[name] = (differing, folded, stored)
    return compared


def primary_key(conn: Any, table: str) -> list[tuple[int, str]]:
    """The stored table's primary key columns, in key order, as (index, name); empty when it
    has none (then only the scratch database's comparison applies)."""
    columns = conn.execute(f"PRAGMA main.table_info({table})").fetchall()
    return [(c[0], c[1]) for c in sorted(columns, key=lambda c: c[5]) if c[5]]


def compare_rows(
    conn: Any,
    tables: Mapping[str, Mapping[Any, Sequence[Any]]],
    part: int,
    parts: int,
) -> Compared:
    """Compare refolded rows kept in memory (table -> key -> row in column order) with the
    stored tables, scanning only the stored rows of this worker's share of the keys."""
    differing = folded = stored = 0
    for table, rows in tables.items():
        key = primary_key(conn, table)
        share = share_of(f'"{key[-1][1]}"', parts)
        params = (part,) if parts > 1 else ()
        ordered = _sorted_rows(rows)
        if ordered is None or not _in_key_order(conn, table, ordered, key, share, params):
            differing += len(rows) - _matching(conn, table, rows, key, share, params)
        folded += len(rows)
        stored += conn.execute(f"SELECT count(*) FROM main.{table}").fetchall()[0][0]
    return differing, folded, stored


def _sorted_rows(rows: Mapping[Any, Sequence[Any]]) -> list[Sequence[Any]] | None:
    """The rows by key as SQLite orders a primary key (BINARY collation is UTF-8 byte order,
    which is the order of Python's str); None when the keys do not sort together."""
    try:
        return [rows[k] for k in sorted(rows)]
    except TypeError:
        return None


def _in_key_order(
    conn: Any,
    table: str,
    ordered: list[Sequence[Any]],
    key: list[tuple[int, str]],
    share: str,
    params: tuple[int, ...],
) -> bool:
    """True only when the stored rows of the share are exactly the refold's: both in key order,
    compared pair by pair, every step in C. A stored row equal to the refolded row beside it
    is that row stored as it is (the key is part of the row), so all pairs equal and no row
    left over is the proof. False proves nothing (a row missing shifts every pair after it):
    ``_matching`` then decides, key by key."""
    order = ", ".join(f'"{name}"' for _, name in key)
    scan = conn.execute(f"SELECT * FROM main.{table} WHERE {share} ORDER BY {order}", params)
    # The refold first: when it runs out, the scan's next row is still there to be seen.
    equal = sum(map(eq, map(tuple, ordered), scan))
    return equal == len(ordered) and next(scan, None) is None


def _matching(
    conn: Any,
    table: str,
    rows: Mapping[Any, Sequence[Any]],
    key: list[tuple[int, str]],
    share: str,
    params: tuple[int, ...],
) -> int:
    """How many stored rows of the share equal, value for value, the refolded row of their
    key: the comparison that decides."""
    found = rows.get
    matched = 0
    scan = conn.execute(f"SELECT * FROM main.{table} WHERE {share}", params)
    if len(key) == 1:
        ((at, _),) = key
        for row in scan:
            mine = found(row[at])
            if mine is not None and tuple(mine) == row:
                matched += 1
    else:
        at_all = [at for at, _ in key]
        for row in scan:
            mine = found(tuple([row[at] for at in at_all]))
            if mine is not None and tuple(mine) == row:
                matched += 1
    return matched


def compare_owned(
    conn: Any, image: bytes, tables: Mapping[str, Sequence[str]], streams: Sequence[str]
) -> dict[str, Compared]:
    """Compare the refold of a few streams (``image``, serialized) with the stored rows they
    own, as ``compare_image`` compares whole tables: a stored row is owned when a column of its
    primary key holds one of the ``streams`` or the id part of one (``o7`` of ``order:o7``).
    The third figure counts the refold's rows plus the owned stored rows the refold lacks, so
    the stored rows equal the refold exactly when it equals the second and none differ."""
    owners = json.dumps(sorted({*streams, *(s.partition(":")[2] for s in streams)} - {""}))
    return _compare_loaded(
        conn,
        image,
        tables,
        lambda table, in_fold: in_fold + _owned_not_folded(conn, table, owners),
    )


def _owned_not_folded(conn: Any, table: str, owners: str) -> int:
    """Stored rows owned by ``owners`` (a JSON array) whose key the refold does not hold; one
    query per key column, so each can search that column's index where there is one."""
    keys = [f'"{name}"' for _, name in primary_key(conn, table)]
    if not keys:
        return 0
    listed = ", ".join(keys)
    on = " AND ".join(f"f.{k} = m.{k}" for k in keys)
    owned = " UNION ".join(
        f"SELECT {listed} FROM main.{table} WHERE {k} IN (SELECT value FROM json_each(?1))"
        for k in keys
    )
    sql = (
        f"SELECT count(*) FROM ({owned}) m"
        f" WHERE NOT EXISTS (SELECT 1 FROM fold.{table} f WHERE {on})"
    )
    return int(conn.execute(sql, (owners,)).fetchall()[0][0])
