"""The operator console's reads: typed rows from the read models and the log, no writes.

Every function takes an open connection (read-only is enough) and answers msgspec Structs, so
the console's HTTP adapter holds no SQL. Lists are keyset-paged on ``(updated_at, id)``, newest
first: the tables' ``*_by_update`` and ``*_by_state (state, updated_at)`` indexes carry that
order (a WITHOUT ROWID index ends with the primary key), so a page costs an index walk of
``limit`` rows however many entities there are (ADR 0023).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.domain import MACHINES
from engine.domain.rows import LeaseRow, out, wire
from projections.rows import select

MAX_PAGE = 200
MAX_EXPORT = 100_000
SCAN_BUDGET = 5_000  # rows one page may examine for a filter no index serves (agent)
SORT_LIMIT = 5_000  # at most this many id-prefix matches are sorted; more filter the window
_TOP = "\U0010ffff"  # sorts after every character: the end of a prefix range


class QueryError(ValueError):
    """A filter or cursor the console cannot answer; the message is meant for the operator."""


@dataclass(frozen=True)
class _Table:
    table: str
    key: str
    agent: str  # an SQL expression for the entity's agent
    summary: str  # an SQL expression shown beside each row


_TABLES = {
    "jobs": _Table("jobs", "job_id", "agent", "coalesce(result, reason)"),
    "sessions": _Table("sessions", "session_id", "agent", "origin"),
    "tasks": _Table(
        "tasks",
        "task_id",
        "(SELECT s.agent FROM sessions s WHERE s.session_id = tasks.session_id)",
        "coalesce(status_text, text)",
    ),
}
_KIND_OF_TABLE = {"jobs": "job", "sessions": "session", "tasks": "task"}
STATES = {spec.kind: tuple(str(s) for s in spec.states) for spec in MACHINES}


class ListRow(msgspec.Struct, frozen=True):
    id: str
    state: str
    version: int
    session_id: str
    agent: str | None
    summary: str | None
    created_at: str
    updated_at: str


class ListPage(msgspec.Struct, frozen=True):
    items: list[ListRow]
    next: str | None  # the cursor of the next (older) page, None on the last
    partial: bool = False  # short because the scan budget ran out, not because none are left


class Filters(msgspec.Struct, frozen=True):
    state: str | None = None
    session: str | None = None
    agent: str | None = None
    prefix: str | None = None


def list_entities(
    conn: Any, table: str, filters: Filters, after: str | None, limit: int
) -> ListPage:
    """One page of sessions, jobs or tasks, most recently updated first.

    ``after`` is the ``next`` of the previous page. With an agent filter, or an id prefix
    matching more than ``SORT_LIMIT`` rows, a page examines at most ``SCAN_BUDGET`` rows; when
    that runs out first the page is ``partial`` (possibly empty) and ``next`` goes on from
    where it stopped.

    Raises:
        QueryError: unknown table or state, a bad cursor, a limit out of 1..MAX_PAGE.
    """
    spec = _TABLES.get(table)
    if spec is None:
        raise QueryError(f"no list {table!r}; one of {', '.join(_TABLES)}")
    if not 1 <= limit <= MAX_PAGE:
        raise QueryError(f"limit must be 1..{MAX_PAGE}")
    where: list[str] = []
    args: list[Any] = []
    if filters.state:
        states = STATES[_KIND_OF_TABLE[table]]
        if filters.state not in states:
            raise QueryError(f"state {filters.state!r} is not one of {', '.join(states)}")
        where.append("state = ?")
        args.append(filters.state)
    if filters.session:
        where.append("session_id = ?")
        args.append(filters.session)
    # Filters no index serves in list order are applied to a bounded window of that order.
    scanned: list[str] = []
    scanned_args: list[Any] = []
    if filters.agent:
        scanned.append(f"{spec.agent} = ?")
        scanned_args.append(filters.agent)
    if filters.prefix:
        prefix_range = (
            f"{spec.key} >= ? AND {spec.key} < ?",
            [filters.prefix, filters.prefix + _TOP],
        )
        # A narrow prefix is a primary-key range, sorted; a wide one ("job_") would sort
        # most of the table, so it filters the window instead.
        matching = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {spec.table} WHERE {prefix_range[0]} LIMIT ?)",
            (*prefix_range[1], SORT_LIMIT + 1),
        ).fetchall()[0][0]
        target, target_args = (where, args) if matching <= SORT_LIMIT else (scanned, scanned_args)
        target.append(prefix_range[0])
        target_args += prefix_range[1]
    if after:
        updated, sep, key = after.partition(",")
        if not sep or not updated or not key:
            raise QueryError("after must be the 'next' cursor of a previous page")
        where.append(f"(updated_at, {spec.key}) < (?, ?)")
        args += [updated, key]
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    order = f"ORDER BY updated_at DESC, {spec.key} DESC"
    columns = (
        f"{spec.key}, state, version, session_id, {spec.agent}, {spec.summary},"
        f" created_at, updated_at"
    )
    if not scanned:
        # Keys first, rows after: when the page has to be sorted (a prefix range), the sorter
        # then carries keys, not whole rows with their results (about 3x faster).
        rows = conn.execute(
            f"SELECT {columns} FROM {spec.table} WHERE {spec.key} IN"
            f" (SELECT {spec.key} FROM {spec.table} {clause} {order} LIMIT ?) {order}",
            (*args, limit + 1),
        ).fetchall()
        return _page(rows, limit, None)
    # Filter a window of at most SCAN_BUDGET rows of the indexed order, so a page costs the
    # same for a rare agent as for a common one. A short page whose window was full says so
    # (partial) and carries on from the window's end.
    rows = conn.execute(
        f"SELECT {columns} FROM (SELECT * FROM {spec.table} {clause} {order} LIMIT ?)"
        f" AS {spec.table} WHERE {' AND '.join(scanned)} {order} LIMIT ?",
        (*args, SCAN_BUDGET, *scanned_args, limit + 1),
    ).fetchall()
    if len(rows) > limit:
        return _page(rows, limit, None)
    edge = conn.execute(
        f"SELECT updated_at, {spec.key} FROM {spec.table} {clause} {order} LIMIT 1 OFFSET ?",
        (*args, SCAN_BUDGET - 1),
    ).fetchall()
    return _page(rows, limit, f"{edge[0][0]},{edge[0][1]}" if edge else None)


def _page(rows: list[Any], limit: int, window_end: str | None) -> ListPage:
    items = [ListRow(*row) for row in rows[:limit]]
    if len(rows) > limit:
        return ListPage(items, f"{items[-1].updated_at},{items[-1].id}")
    return ListPage(items, window_end, partial=window_end is not None)


# A lease as the overview shows it: its row's holder and times, derived from the one row type.
LeaseLine = wire(
    LeaseRow,
    "LeaseLine",
    __name__,
    keep=("name", "state", "holder", "host", "pid", "epoch", "renewed_at"),
)


class Problem(msgspec.Struct, frozen=True):
    kind: str
    id: str
    state: str
    detail: str | None
    at: str


class Overview(msgspec.Struct, frozen=True):
    head: int
    counts: dict[str, dict[str, int]]  # kind -> state -> entities in that state, zeros kept
    leases: list[LeaseLine]  # type: ignore[valid-type]
    errors: list[Problem]
    unfinished_notifications: list[Problem]


def overview(conn: Any, recent: int = 10) -> Overview:
    """Counts per state per machine, the log head, leases and what needs an operator's eye.

    A notify hook recorded as started and never finished is a lost notification once no
    server is running it (design.md §9); the console lists them all and lets the reader judge.
    """
    counts: dict[str, dict[str, int]] = {}
    for table, kind in (*_KIND_OF_TABLE.items(), ("leases", "lease")):
        found = dict(conn.execute(f"SELECT state, count(*) FROM {table} GROUP BY state"))
        counts[kind] = {state: found.get(state, 0) for state in STATES[kind]}
    head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchall()[0][0]
    leases = [out(LeaseLine, row) for row in select(conn, LeaseRow, "ORDER BY name")]
    errors = [
        Problem("job", *r)
        for r in conn.execute(
            "SELECT job_id, state, coalesce(result, reason), updated_at FROM jobs"
            " WHERE state = 'error' ORDER BY updated_at DESC LIMIT ?",
            (recent,),
        )
    ] + [
        Problem("session", *r)
        for r in conn.execute(
            "SELECT session_id, state, error, updated_at FROM sessions"
            " WHERE state = 'failed' ORDER BY updated_at DESC LIMIT ?",
            (recent,),
        )
    ]
    notifications = [
        Problem("job", *r)
        for r in conn.execute(
            "SELECT job_id, state, 'notify hook pid ' || notify_pid, updated_at FROM jobs"
            " WHERE notify_pid IS NOT NULL AND notify_ms IS NULL LIMIT ?",
            (recent,),
        )
    ]
    errors.sort(key=lambda p: p.at, reverse=True)
    return Overview(head, counts, leases, errors[:recent], notifications)


class Link(msgspec.Struct, frozen=True):
    kind: str
    id: str
    state: str
    relation: str  # parent, child, session, task, job


class Entity(msgspec.Struct, frozen=True):
    kind: str
    id: str
    stream_id: str
    row: dict[str, Any]  # every column of its read model row, as stored
    lineage: list[Link]


_ENTITY = {
    "job": ("jobs", "job_id"),
    "session": ("sessions", "session_id"),
    "task": ("tasks", "task_id"),
}
_LINEAGE = {
    "job": (
        ("parent", "job", "SELECT p.job_id, p.state FROM jobs j JOIN jobs p"
         " ON p.job_id = j.parent_job WHERE j.job_id = ?"),
        ("child", "job", "SELECT job_id, state FROM jobs WHERE parent_job = ? LIMIT 200"),
        ("session", "session", "SELECT s.session_id, s.state FROM jobs j JOIN sessions s"
         " ON s.session_id = j.session_id WHERE j.job_id = ?"),
        ("task", "task", "SELECT t.task_id, t.state FROM jobs j JOIN tasks t"
         " ON t.task_id = j.task_id WHERE j.job_id = ?"),
    ),
    "session": (
        ("job", "job", "SELECT job_id, state FROM jobs WHERE session_id = ?"
         " ORDER BY accepted_position DESC LIMIT 200"),
        ("task", "task", "SELECT task_id, state FROM tasks WHERE session_id = ?"
         " ORDER BY created_at DESC LIMIT 200"),
    ),
    "task": (
        ("session", "session", "SELECT s.session_id, s.state FROM tasks t JOIN sessions s"
         " ON s.session_id = t.session_id WHERE t.task_id = ?"),
        ("job", "job", "SELECT job_id, state FROM jobs WHERE task_id = ? LIMIT 200"),
        # Its push deliveries (ADR 0039): each one's trail is the stream push:<id>.
        ("push", "push", "SELECT delivery_id, progress FROM push_outbox WHERE task_id = ?"
         " ORDER BY cause, delivery_id LIMIT 200"),
    ),
}  # fmt: skip


def entity(conn: Any, kind: str, entity_id: str) -> Entity | None:
    """A session, job or task with its whole read-model row and its lineage; None if absent.

    Raises:
        QueryError: an unknown kind.
    """
    if kind not in _ENTITY:
        raise QueryError(f"no entity kind {kind!r}; one of {', '.join(_ENTITY)}")
    table, key = _ENTITY[kind]
    rows = conn.execute(f"SELECT * FROM {table} WHERE {key} = ?", (entity_id,)).fetchall()
    if not rows:
        return None
    names = [r[0] for r in conn.execute("SELECT name FROM pragma_table_info(?)", (table,))]
    links = [
        Link(link_kind, linked, state, relation)
        for relation, link_kind, sql in _LINEAGE[kind]
        for linked, state in conn.execute(sql, (entity_id,))
    ]
    row = {
        name: value
        for name, value in zip(names, rows[0], strict=True)
        if name not in ("start_token",)  # a capability of the run, not for display
    }
    return Entity(kind, entity_id, f"{kind}:{entity_id}", row, links)


class LogRow(msgspec.Struct, frozen=True):
    position: int
    stream_id: str
    version: int
    event_type: str
    recorded_at: str
    epoch: int
    state: str
    event: msgspec.Raw


class LogPage(msgspec.Struct, frozen=True):
    events: list[LogRow]
    next: int | None  # pass as ``before`` for the next (older) page


def log_page(
    conn: Any, before: int | None, kinds: Sequence[str], event_type: str | None, limit: int
) -> LogPage:
    """Events by position, newest first, optionally of some stream kinds and one event type.

    Raises:
        QueryError: an unknown stream kind or a limit out of 1..MAX_PAGE.
    """
    if not 1 <= limit <= MAX_PAGE:
        raise QueryError(f"limit must be 1..{MAX_PAGE}")
    known = set(STATES)
    unknown = [k for k in kinds if k not in known]
    if unknown:
        raise QueryError(f"stream kind {unknown[0]!r} is not one of {', '.join(sorted(known))}")
    where: list[str] = []
    args: list[object] = []
    if before is not None:
        where.append("position < ?")
        args.append(before)
    if kinds:
        where.append("(" + " OR ".join("(stream_id >= ? AND stream_id < ?)" for _ in kinds) + ")")
        for k in kinds:
            args += [f"{k}:", f"{k}:{_TOP}"]
    if event_type:
        where.append("event_type = ?")
        args.append(event_type)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(
        "SELECT position, stream_id, version, event_type, recorded_at, epoch, state, payload"
        f" FROM events {clause} ORDER BY position DESC LIMIT ?",
        (*args, limit + 1),
    ).fetchall()
    events = [
        LogRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], msgspec.Raw(bytes(r[7])))
        for r in rows[:limit]
    ]
    return LogPage(events, events[-1].position if len(rows) > limit else None)


def export_rows(conn: Any, first: int, last: int) -> Iterator[tuple[Any, ...]]:
    """Raw event rows with ``first <= position <= last`` (for ``engine.audit.export_line``).
    The range is checked before any row is read, so a refusal comes before the first byte.

    Raises:
        QueryError: an empty range, or one longer than MAX_EXPORT events.
    """
    if first < 1 or last < first:
        raise QueryError("the range must satisfy 1 <= from <= to")
    if last - first + 1 > MAX_EXPORT:
        raise QueryError(f"export at most {MAX_EXPORT} events at once (foldline export has no cap)")
    rows: Iterator[tuple[Any, ...]] = conn.cursor().execute(
        "SELECT position, stream_id, version, event_type, recorded_at, epoch, command_id, state,"
        " payload, hash FROM events WHERE position BETWEEN ? AND ? ORDER BY position",
        (first, last),
    )
    return rows
