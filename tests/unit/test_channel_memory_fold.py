"""The channel read model's memory fold (the audit's refold) leaves exactly the rows its SQL
handlers leave, for every event it handles: controls sent, delivered, lost, answered and lost
to a next run or to each way a job ends, questions asked, asked again, answered and dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw

from engine.audit import tables
from engine.domain import job as j
from engine.events import Event, RecordedEvent
from engine.projection import Folder
from projections.channel import ChannelProjection

_STEPS: list[tuple[str, str, Event]] = [
    ("j1", "accepted", j.JobAccepted(session="s1")),
    ("j1", "running", j.JobStarted(run_id="r1")),
    ("j1", "running", j.JobControlSent(action="message", text="more", by="operator")),
    ("j1", "running", j.JobControlSent(action="steer", text="left", turn="t1", by="s")),
    ("j1", "running", j.JobInputRequested(request="q1", question="which?")),
    ("j1", "running", j.JobControlSent(action="respond", request="q1", response='{"a": 1}')),
    ("j1", "running", j.JobControlDelivered(control=3, run_id="r1")),
    ("j1", "running", j.JobInputRequested(request="q2", question="and?")),
    ("j1", "running", j.JobStarted(run_id="r2", resumed=True)),  # steer lost, q2 dropped
    ("j1", "running", j.JobControlSent(action="finalize", by="operator")),
    ("j1", "running", j.JobControlLost(control=10, reason="stdin closed")),
    ("j1", "running", j.JobControlDelivered(control=999, run_id="r2")),  # no such control
    ("j1", "running", j.JobControlSent(action="effort", effort="high")),
    ("j1", "running", j.JobInputRequested(request="q2", question="again?")),  # a new question
    ("j1", "ok", j.JobFinished(outcome="ok")),  # the effort lost, q2 dropped
    ("j2", "accepted", j.JobAccepted(session="s1")),
    ("j2", "running", j.JobStarted(run_id="r3")),
    ("j2", "running", j.JobControlSent(action="message", text="x")),
    ("j2", "superseded", j.JobSuperseded(superseded_by="j3")),
    ("j3", "accepted", j.JobAccepted(session="s1")),
    ("j3", "running", j.JobStarted(run_id="r4")),
    ("j3", "running", j.JobControlSent(action="interrupt", turn="t9")),
    ("j3", "cancelled", j.JobCancelled(reason="asked")),
    ("j4", "accepted", j.JobAccepted(session="s1")),
    ("j4", "running", j.JobStarted(run_id="r5")),
    ("j4", "running", j.JobInputRequested(request="q", question="?")),
    ("j4", "error", j.JobResumeFailed(reason="gone")),
    ("j5", "accepted", j.JobAccepted(session="s1")),
    ("j5", "running", j.JobStarted(run_id="r6")),
    ("j5", "running", j.JobControlSent(action="message", text="still pending")),
    ("j5", "running", j.JobInputRequested(request="q", question="still open?")),
]


def _recorded() -> list[RecordedEvent]:
    versions: dict[str, int] = {}
    recorded = []
    for position, (job, state, event) in enumerate(_STEPS, start=1):
        stream = f"job:{job}"
        versions[stream] = versions.get(stream, 0) + 1
        recorded.append(
            RecordedEvent(
                position=position,
                stream_id=stream,
                version=versions[stream],
                event_type=str(type(event).__struct_config__.tag),
                recorded_at=f"2026-01-01T00:00:{position:02d}Z",
                epoch=1,
                command_id=f"c{position}" if position % 2 else None,
                state=state,
                event=event,
                hash="",
            )
        )
    return recorded


def _fold(path: Path, memory: bool) -> tuple[list[Any], Folder]:
    conn = apsw.Connection(str(path))
    cursor = conn.cursor()
    cursor.execute(ChannelProjection.ddl)
    projection = ChannelProjection()
    folder = projection.memory_folder(cursor) if memory else projection.folder(cursor)
    for event in _recorded():
        if folder.event_types is None or event.event_type in folder.event_types:
            folder.feed(event)
    folder.finish()
    rows = [
        cursor.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
        for table in ChannelProjection.tables
    ]
    conn.close()
    return rows, folder


def test_channel_memory_fold_leaves_the_rows_of_the_sql_handlers(tmp_path: Path) -> None:
    by_sql, _ = _fold(tmp_path / "sql.db", memory=False)
    in_memory, folder = _fold(tmp_path / "memory.db", memory=True)
    controls, requests = by_sql
    assert {row[6] for row in controls} == {"delivered", "lost", "pending"}
    assert {row[3] for row in requests} == {"answered", "dropped", "pending"}
    assert in_memory == by_sql
    handled = ChannelProjection().handled_events()
    assert handled is not None and folder.event_types == frozenset(handled)


def test_channel_memory_fold_rows_compare_equal_with_the_stored_rows(tmp_path: Path) -> None:
    """Kept in memory and fed through its routes, as the audit does, the rows equal the stored
    rows value for value, in one share or two; one edited stored row is one difference."""
    by_sql = tmp_path / "sql.db"
    _fold(by_sql, memory=False)
    conn = apsw.Connection(":memory:")
    conn.execute(ChannelProjection.ddl)
    folder = ChannelProjection().memory_folder(conn.cursor())
    assert folder.rows is not None and folder.routes is not None
    for event in _recorded():
        route = folder.routes.get(event.event_type)
        if route is not None:
            route(event, event.stream_id.partition(":")[2])
    kept = folder.rows()
    stored = apsw.Connection(str(by_sql))
    count = sum(len(rows) for rows in kept.values())
    assert tables.compare_rows(stored, kept, 0, 1) == (0, count, count)
    halves = [tables.compare_rows(stored, kept, part, 2) for part in (0, 1)]
    assert sum(folded - differing for differing, folded, _ in halves) == count
    stored.execute("UPDATE controls SET reason = 'edited' WHERE control = 4")
    assert tables.compare_rows(stored, kept, 0, 1) == (1, count, count)
