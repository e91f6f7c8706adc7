"""The audit's in-memory folds leave exactly the rows the SQL handlers leave, for every event
type they handle (``projections.fold``): fed the same events, both fold into a SQLite file
and the tables are compared row by row. A shaped fold's own change, written by the generic
writers, leaves them too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from engine.audit import tables
from engine.domain import job as j
from engine.domain import lease as le
from engine.domain import result as r
from engine.domain import session as s
from engine.events import Event, RecordedEvent, event_type_of
from engine.projection import Projection
from projections.changes import Shape, Shaped
from projections.fold import FoldedProjection, MemoryTable, SqlTable
from projections.jobs import JobsProjection
from projections.leases import LeasesProjection
from projections.runs import RunsProjection
from projections.sessions import SessionsProjection

FOLDED: list[FoldedProjection] = [
    JobsProjection(),
    RunsProjection(),
    SessionsProjection(),
    LeasesProjection(),
]


def _named(projection: Projection) -> str:
    """A test id by the projection's name: a repr holds an address, which differs between
    pytest-xdist's workers, and they must collect the same ids."""
    return str(projection.name)


_SESSION_EVENTS: list[tuple[str, Event]] = [
    ("created", s.SessionCreated(agent="a")),
    ("running", s.SessionStarted(run_id="sr1", pid=41, start_token="t")),
    ("paused", s.SessionPaused()),
    ("running", s.SessionResumed(run_id="sr2")),
    ("running", s.SessionStarted(run_id="sr3", pid=0)),  # no controller: no run
    ("running", s.SessionStarted(run_id="sr4", pid=42, start_token="u")),
    ("running", s.SessionTainted(reason="first")),
    ("running", s.SessionTainted(reason="second")),
    ("running", s.SessionOwes(owed=s.Owed(kind="job", ref="j1"))),
    ("running", s.SessionSettled(owed=s.Owed(kind="job", ref="j1"))),
    ("detached", s.SessionDetached(by="operator")),
    ("running", s.SessionAttached()),
    ("suspended", s.SessionSuspended(reason="host")),
    ("running", s.SessionResumed()),  # no run id: the old one stays
    ("finishing", s.SessionFinishing(requested="failed", error="boom")),
    ("detached", s.SessionFinished(outcome="detached")),  # keeps its controller
]

_JOB_EVENTS: list[tuple[str, Event]] = [
    (
        "accepted",
        j.JobAccepted(
            session="s1",
            agent="coder",
            prompt_file="p.md",
            parent_job="j0",
            depth=2,
            batch="b",
            resource_group="g",
            units=3,
            write_scope=("src/", "docs/"),
            task="t1",
        ),
    ),
    (
        "running",
        j.JobStarted(
            run_id="r1",
            pid=7,
            start_token="k",
            epoch=2,
            token_digest="d",
            worktree="/wt/j1",
            base_commit="b" * 40,
        ),
    ),
    ("paused", j.JobPaused(by="session")),
    ("running", j.JobContinued()),
    ("suspended", j.JobSuspended(reason="capacity")),
    # runs + 1, first start kept, the worktree named again
    ("running", j.JobStarted(run_id="r2", pid=8, resumed=True, worktree="/wt/j1")),
    ("cancelling", j.JobCancelRequested(reason="")),
    ("running", j.JobNotifyStarted(pid=9)),
    ("running", j.JobNotifyFinished(exit_code=None, ms=12, stdout_tail="o", stderr_tail="e")),
    ("running", j.JobNotifyLost(pid=9, reason="crash")),
    (
        "ok",
        j.JobFinished(
            outcome="ok",
            result="done",
            files=(j.FileEntry(path="a.txt", size=3),),
            exit_code=0,
            warnings=("w1", "w2"),
            patch=j.PatchEntry(
                sha256="a" * 64, size=9, paths=("src/x", "docs/y"), base_commit="b" * 40
            ),
        ),
    ),
]
_RESULT_EVENTS: list[tuple[str, Event]] = [
    ("read", r.ResultRead(by="operator")),
    ("accepted", r.ResultAccepted(by="operator", reason="fine")),
    (
        "integrating",
        r.ResultIntegrating(
            by="j0", sha256="a" * 64, before_tree="1" * 40, after_tree="2" * 40, paths=("src/x",)
        ),
    ),
    ("accepted", r.ResultIntegrationUndone(reason="crashed before the files were written")),
    (
        "integrating",
        r.ResultIntegrating(by="j0", sha256="a" * 64, before_tree="1" * 40, after_tree="3" * 40),
    ),
    ("integrated", r.ResultIntegrated(by="j0", sha256="a" * 64, tree="3" * 40, paths=("src/x",))),
]
_OTHER_ENDS: list[tuple[str, list[tuple[str, Event]]]] = [
    ("j2", [("superseded", j.JobSuperseded(superseded_by="j3"))]),
    ("j3", [("cancelled", j.JobCancelled(reason="asked"))]),
    ("j4", [("cancelled", j.JobCancelled())]),
    ("j5", [("error", j.JobResumeFailed(reason="prompt file gone"))]),
    ("j6", [("suspended", j.JobSuspended())]),
    ("j7", [("paused", j.JobPaused())]),
    ("j8", [("ok", j.JobFinished(outcome="ok"))]),  # no patch
]


def _events() -> Iterator[tuple[str, str, Event]]:
    """(stream, state, event) in log order: a job through every event, others that end in
    every other way, a result judged, events for a job that does not exist."""
    for state, event in _SESSION_EVENTS:
        yield "session:s1", state, event
    for session, ends in (
        ("s2", [("completed", s.SessionFinished(outcome="completed"))]),
        ("s3", [("stopping", s.SessionStopping()), ("stopped", s.SessionStopped())]),
        ("s4", [("suspended", s.SessionSuspended())]),
        ("s5", [("cancelling", s.SessionCancelling()), ("cancelled", s.SessionCancelled())]),
    ):
        created = s.SessionCreated(origin="a2a", resource_group="g", units=2, has_controller=True)
        yield f"session:{session}", "created", created
        yield f"session:{session}", "running", s.SessionStarted(run_id=session, pid=5)
        for state, end in ends:
            yield f"session:{session}", state, end
    for state, event in _JOB_EVENTS:
        yield "job:j1", state, event
    for state, event in _RESULT_EVENTS:
        yield "result:j1", state, event
    for job, ends in _OTHER_ENDS:
        yield f"job:{job}", "accepted", j.JobAccepted(session="s1")
        yield f"job:{job}", "running", j.JobStarted(run_id=f"run-{job}")
        for state, event in ends:
            yield f"job:{job}", state, event
    yield "lease:workspace", "held", le.LeaseAcquired(holder="h1", host="a", pid=3, epoch=1)
    yield "lease:workspace", "held", le.LeaseRenewed(holder="h1", epoch=1)
    yield (
        "lease:workspace",
        "held",
        le.LeaseTakenOver(
            holder="h2", host="b", pid=4, epoch=2, previous_holder="h1", previous_epoch=1
        ),
    )
    yield "lease:workspace", "released", le.LeaseReleased(holder="h2", epoch=2)
    yield "lease:other", "released", le.LeaseReleased(holder="h3", epoch=1)  # no row: nothing
    yield "job:nobody", "running", j.JobStarted(run_id="x")  # UPDATE of no row: nothing
    yield "result:nobody", "rejected", r.ResultRejected(by="operator", reason="no")
    # A log written before the intent existed: integrated straight from accepted.
    yield "result:j8", "read", r.ResultRead(by="operator")
    yield "result:j8", "accepted", r.ResultAccepted(by="operator", reason="ok")
    yield "result:j8", "integrated", r.ResultIntegrated(by="operator", sha256="abc")


def _recorded() -> list[RecordedEvent]:
    versions: dict[str, int] = {}
    recorded = []
    for position, (stream, state, event) in enumerate(_events(), start=1):
        versions[stream] = versions.get(stream, 0) + 1
        recorded.append(
            RecordedEvent(
                position=position,
                stream_id=stream,
                version=versions[stream],
                event_type=str(type(event).__struct_config__.tag),
                recorded_at=f"2026-01-01T00:00:{position:02d}Z",
                epoch=position % 3,
                command_id=f"c{position}" if position % 2 else None,
                state=state,
                event=event,
                hash="",
            )
        )
    return recorded


def _fold(path: Path, projection: Projection, memory: bool) -> list[Any]:
    conn = apsw.Connection(str(path))
    cursor = conn.cursor()
    cursor.execute(projection.ddl)
    folder = projection.memory_folder(cursor) if memory else projection.folder(cursor)
    for event in _recorded():
        if folder.event_types is None or event.event_type in folder.event_types:
            folder.feed(event)
    folder.finish()
    (table,) = projection.tables
    rows = cursor.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
    conn.close()
    return rows


@pytest.mark.parametrize("projection", FOLDED, ids=_named)
def test_memory_fold_leaves_the_rows_of_the_sql_handlers(
    tmp_path: Path, projection: Projection
) -> None:
    by_sql = _fold(tmp_path / "sql.db", projection, memory=False)
    in_memory = _fold(tmp_path / "memory.db", projection, memory=True)
    assert in_memory == by_sql and by_sql


@pytest.mark.parametrize("projection", FOLDED, ids=_named)
def test_memory_fold_handles_what_the_projection_handles(projection: Projection) -> None:
    conn = apsw.Connection(":memory:")
    conn.execute(projection.ddl)
    handled = projection.handled_events()
    assert handled is not None
    assert projection.memory_folder(conn.cursor()).event_types == frozenset(handled)


def _fold_changes(path: Path, projection: FoldedProjection, memory: bool) -> list[Any]:
    """Every fold's ``Change`` (a shaped fold's too) through the generic writers."""
    conn = apsw.Connection(str(path))
    cursor = conn.cursor()
    cursor.execute(projection.ddl)
    (table,) = projection.tables
    folds = {event_type_of(c): fold for c, fold in projection.folds.items()}
    in_memory, sql = MemoryTable(cursor, table, projection.key), SqlTable(table, projection.key)
    for event in _recorded():
        fold = folds.get(event.event_type)
        if fold is not None:
            change = fold(event, event.stream_id.partition(":")[2])
            if memory:
                in_memory.write(change)
            else:
                sql.write(cursor, change)
    if memory:
        in_memory.finish()
    rows = cursor.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
    conn.close()
    return rows


@pytest.mark.parametrize("projection", FOLDED, ids=_named)
@pytest.mark.parametrize("memory", [False, True], ids=["sql", "memory"])
def test_changes_through_the_generic_writers_leave_the_same_rows(
    tmp_path: Path, projection: FoldedProjection, memory: bool
) -> None:
    assert any(type(fold) is Shaped for fold in JobsProjection.folds.values())
    expected = _fold(tmp_path / "sql.db", projection, memory=False)
    assert _fold_changes(tmp_path / "changes.db", projection, memory) == expected


def test_memory_fold_refuses_a_second_accept_as_sql_does(tmp_path: Path) -> None:
    conn = apsw.Connection(str(tmp_path / "twice.db"))
    cursor = conn.cursor()
    cursor.execute(JobsProjection.ddl)
    folder = JobsProjection().memory_folder(cursor)
    accepted = next(e for e in _recorded() if e.event_type == "job.accepted")
    folder.feed(accepted)
    with pytest.raises(ValueError, match="UNIQUE"):
        folder.feed(accepted)


@pytest.mark.parametrize("width", [6, 8], ids=["short", "long"])
def test_shaped_new_row_of_the_wrong_width_is_refused_by_both_writers(
    tmp_path: Path, width: int
) -> None:
    """A new row's fold whose tuple is not as wide as its key and shape fails in memory as
    in SQL (where the statement's bindings do not match), rather than leaving a row the
    other writer would not: the audit's fast pass then doubts and refolds the exact way."""
    shape = Shape("run_id", "pid", "start_token", "epoch", "started_at")  # and the 2 key columns
    row = ("job", "j1", "r1", 7, "t", 0, "2026-01-01T00:00:00Z", "one too many")
    fold = shape.puts(lambda e, entity: row[:width])
    conn = apsw.Connection(str(tmp_path / "runs.db"))
    cursor = conn.cursor()
    cursor.execute(RunsProjection.ddl)
    started = next(e for e in _recorded() if e.event_type == "job.started")
    in_memory = MemoryTable(cursor, "runs", RunsProjection.key)
    with pytest.raises(ValueError, match="unpack"):
        in_memory.shaped(fold)(started, "j1")
    assert in_memory.rows == {}
    with pytest.raises(apsw.BindingsError):
        SqlTable("runs", RunsProjection.key).shaped(fold)(cursor, started, "j1")
    assert cursor.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]


def _kept_rows(projection: Projection) -> Any:
    """Fold through the folder's own routes (as the audit does) and return the rows it keeps
    in memory, never written."""
    conn = apsw.Connection(":memory:")
    conn.execute(projection.ddl)
    folder = projection.memory_folder(conn.cursor())
    assert folder.rows is not None and folder.routes is not None
    for event in _recorded():
        route = folder.routes.get(event.event_type)
        if route is not None:
            route(event, event.stream_id.partition(":")[2])
    assert conn.execute(f"SELECT count(*) FROM {projection.tables[0]}").fetchall() == [(0,)]
    return folder.rows()


@pytest.mark.parametrize("projection", FOLDED, ids=_named)
def test_memory_fold_rows_equal_the_stored_rows_as_they_are(
    tmp_path: Path, projection: Projection
) -> None:
    """The rows kept in memory compare equal, value for value, with the rows the SQL handlers
    stored (types as SQLite returns them), in one share or split in two; one edited stored
    row is one difference."""
    by_sql = tmp_path / "sql.db"
    stored = _fold(by_sql, projection, memory=False)
    kept = _kept_rows(projection)
    conn = apsw.Connection(str(by_sql))
    assert tables.compare_rows(conn, kept, 0, 1) == (0, len(stored), len(stored))
    halves = [tables.compare_rows(conn, kept, part, 2) for part in (0, 1)]
    matched = sum(folded - differing for differing, folded, _ in halves)
    assert matched == len(stored) and {h[2] for h in halves} == {len(stored)}
    (table,) = projection.tables
    key = [name for _, name in tables.primary_key(conn, table)]
    first = conn.execute(f"SELECT {', '.join(key)} FROM {table} LIMIT 1").fetchall()[0]
    where = " AND ".join(f"{name} = ?" for name in key)
    last = conn.execute(f"PRAGMA table_info({table})").fetchall()[-1][1]
    conn.execute(f"UPDATE {table} SET {last} = 'edited' WHERE {where}", first)
    assert tables.compare_rows(conn, kept, 0, 1) == (1, len(stored), len(stored))


@pytest.mark.parametrize("projection", FOLDED, ids=_named)
def test_compare_rows_in_key_order_proves_nothing_when_a_row_is_extra_or_missing(
    tmp_path: Path, projection: Projection
) -> None:
    """The rows compared pair by pair in key order prove the tables equal only when every pair
    is equal and no row is left over on either side: a stored row the refold lacks (the last
    in key order, the case a pairing that stops early would miss) or a refolded row missing
    from the table is counted."""
    by_sql = tmp_path / "sql.db"
    stored = _fold(by_sql, projection, memory=False)
    kept = _kept_rows(projection)
    conn = apsw.Connection(str(by_sql))
    (table,) = projection.tables
    rows = kept[table]
    key = tables.primary_key(conn, table)
    ordered = tables._sorted_rows(rows)
    assert ordered is not None and tables._in_key_order(conn, table, ordered, key, "1", ())
    last = max(rows)
    fewer = {k: row for k, row in rows.items() if k != last}
    shorter = tables._sorted_rows(fewer)
    assert shorter is not None and not tables._in_key_order(conn, table, shorter, key, "1", ())
    assert tables.compare_rows(conn, {table: fewer}, 0, 1) == (0, len(stored) - 1, len(stored))
    where = " AND ".join(f'"{name}" = ?' for _, name in key)
    conn.execute(f"DELETE FROM {table} WHERE {where}", last if len(key) > 1 else (last,))
    assert tables.compare_rows(conn, kept, 0, 1) == (1, len(stored), len(stored) - 1)
