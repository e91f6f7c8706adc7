"""Read model: a run's live channel (ADR 0038): every control sent into a job and what became of
it, and every request for input its runs asked and whether it was answered.

A control is ``pending`` from its ``job.control`` until its ``job.control_delivered`` (or
``job.control_lost``); a job that ends with controls still pending loses them in the same fold,
the reason being the state it ended in. A request is ``pending`` until a ``respond`` control
answers it, and ``dropped`` when its run ends unanswered.

A job's next run (a resumed or relaunched one, ``job.started``) is another process: the
questions of the run before are dropped, and so are the controls still pending that were meant
for that run's turn or question (a steer, an interrupt, a response); the others (a message, a
finalize, an effort) go to the new run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from engine.domain import ids
from engine.domain.job import (
    JobCancelled,
    JobControlDelivered,
    JobControlLost,
    JobControlSent,
    JobFinished,
    JobInputRequested,
    JobResumeFailed,
    JobStarted,
    JobSuperseded,
)
from engine.events import RecordedEvent, event_type_of
from engine.projection import DispatchProjection, Folder, handles

PENDING, DELIVERED, LOST = "pending", "delivered", "lost"
ANSWERED, DROPPED = "answered", "dropped"


class ChannelProjection(DispatchProjection):
    name = "channel"
    version = 1
    tables = ("controls", "requests")
    folds_by_entity = True  # every row from its own job's stream
    ddl = """
        CREATE TABLE controls (
            job_id      TEXT    NOT NULL,
            control     INTEGER NOT NULL,  -- its id: the log position of its job.control
            action      TEXT    NOT NULL,
            body        TEXT    NOT NULL,  -- the JSON line given to the run
            sent_by     TEXT    NOT NULL,
            command_id  TEXT,
            state       TEXT    NOT NULL,
            run_id      TEXT,              -- the run it reached
            reason      TEXT,              -- why it was lost
            recorded_at TEXT    NOT NULL,
            settled_at  TEXT,
            PRIMARY KEY (job_id, control)
        ) WITHOUT ROWID;
        CREATE INDEX controls_by_state ON controls (state);
        CREATE INDEX controls_by_command ON controls (command_id) WHERE command_id IS NOT NULL;
        CREATE TABLE requests (
            job_id      TEXT    NOT NULL,
            request     TEXT    NOT NULL,
            question    TEXT    NOT NULL,
            state       TEXT    NOT NULL,
            answer      INTEGER,           -- the id of the respond control
            asked_position INTEGER NOT NULL,  -- of its job.input_requested: the order asked
            asked_at    TEXT    NOT NULL,
            answered_at TEXT,
            PRIMARY KEY (job_id, request)
        ) WITHOUT ROWID;
    """

    @handles(JobControlSent)
    def _sent(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        job = ids.entity_of(e.stream_id)
        cur.execute(
            "INSERT INTO controls (job_id, control, action, body, sent_by, command_id, state,"
            " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (job, e.position, ev.action, line_of(e.position, ev), ev.by, e.command_id,
             PENDING, e.recorded_at),
        )  # fmt: skip
        if ev.action == "respond":
            cur.execute(
                "UPDATE requests SET state = ?, answer = ?, answered_at = ?"
                " WHERE job_id = ? AND request = ? AND state = ?",
                (ANSWERED, e.position, e.recorded_at, job, ev.request, PENDING),
            )

    @handles(JobControlDelivered)
    def _delivered(self, cur: Any, e: RecordedEvent) -> None:
        self._settle(cur, e, DELIVERED, "run_id", e.event.run_id)  # type: ignore[attr-defined]

    @handles(JobControlLost)
    def _lost(self, cur: Any, e: RecordedEvent) -> None:
        self._settle(cur, e, LOST, "reason", e.event.reason)  # type: ignore[attr-defined]

    @staticmethod
    def _settle(cur: Any, e: RecordedEvent, state: str, column: str, value: str) -> None:
        """One control delivered (to a run) or lost (for a reason)."""
        cur.execute(
            f"UPDATE controls SET state = ?, {column} = ?, settled_at = ?"
            " WHERE job_id = ? AND control = ?",
            (state, value, e.recorded_at, ids.entity_of(e.stream_id), e.event.control),  # type: ignore[attr-defined]
        )

    @handles(JobInputRequested)
    def _asked(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        # A request id asked again (a resumed run starts its numbering over) is a new question.
        cur.execute(
            "INSERT OR REPLACE INTO requests (job_id, request, question, state, asked_position,"
            " asked_at) VALUES (?, ?, ?, ?, ?, ?)",
            (ids.entity_of(e.stream_id), ev.request, ev.question, PENDING, e.position,
             e.recorded_at),
        )  # fmt: skip

    @handles(JobStarted)
    def _next_run(self, cur: Any, e: RecordedEvent) -> None:
        job = ids.entity_of(e.stream_id)
        cur.execute(
            "UPDATE controls SET state = ?, reason = ?, settled_at = ?"
            " WHERE job_id = ? AND state = ? AND action IN ('steer', 'interrupt', 'respond')",
            (LOST, "its run ended", e.recorded_at, job, PENDING),
        )
        self._drop_requests(cur, job)

    @handles(JobFinished, JobSuperseded, JobCancelled, JobResumeFailed)
    def _ended(self, cur: Any, e: RecordedEvent) -> None:
        job = ids.entity_of(e.stream_id)
        cur.execute(
            "UPDATE controls SET state = ?, reason = ?, settled_at = ?"
            " WHERE job_id = ? AND state = ?",
            (LOST, f"job {e.state}", e.recorded_at, job, PENDING),
        )
        self._drop_requests(cur, job)

    @staticmethod
    def _drop_requests(cur: Any, job: str) -> None:
        cur.execute(
            "UPDATE requests SET state = ? WHERE job_id = ? AND state = ?",
            (DROPPED, job, PENDING),
        )

    def memory_folder(self, cursor: Any) -> Folder:
        """The handlers above, folded into rows kept in memory (the audit's refold): one dict
        operation per event instead of one to three statements, the rows in each table's
        column order, written once by ``finish`` (``tests/unit/test_memory_folds.py`` folds
        every channel event both ways and compares the tables)."""
        return _MemoryChannel(cursor).folder()


class _MemoryChannel:
    """``controls`` and ``requests`` by primary key, and each job's rows of both, so that a
    job's next run or end touches only its own rows, as the handlers' WHERE clauses do."""

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self.controls: dict[tuple[str, int], list[Any]] = {}
        self.requests: dict[tuple[str, str], list[Any]] = {}
        self.controls_of: dict[str, list[list[Any]]] = {}
        self.requests_of: dict[str, dict[str, list[Any]]] = {}

    def folder(self) -> Folder:
        by_class: dict[type[Any], Callable[[RecordedEvent, str], None]] = {
            JobControlSent: self.sent,
            JobControlDelivered: lambda e, job: self.settle(e, job, DELIVERED, 7),
            JobControlLost: lambda e, job: self.settle(e, job, LOST, 8),
            JobInputRequested: self.asked,
            JobStarted: self.next_run,
            JobFinished: self.ended,
            JobSuperseded: self.ended,
            JobCancelled: self.ended,
            JobResumeFailed: self.ended,
        }
        routes = {event_type_of(cls): route for cls, route in by_class.items()}

        def feed(e: RecordedEvent) -> None:
            route = routes.get(e.event_type)
            if route is not None:
                route(e, ids.entity_of(e.stream_id))

        return Folder(
            feed,
            self.finish,
            frozenset(routes),
            lambda: {"controls": self.controls, "requests": self.requests},
            routes,
        )

    def sent(self, e: RecordedEvent, job: str) -> None:
        ev: Any = e.event
        key = (job, e.position)
        if key in self.controls:
            raise ValueError(f"UNIQUE constraint failed: controls {key!r}")
        row = [job, e.position, ev.action, line_of(e.position, ev), ev.by, e.command_id,
               PENDING, None, None, e.recorded_at, None]  # fmt: skip
        self.controls[key] = row
        self.controls_of.setdefault(job, []).append(row)
        if ev.action == "respond":
            asked = self.requests.get((job, ev.request))
            if asked is not None and asked[3] == PENDING:
                asked[3], asked[4], asked[7] = ANSWERED, e.position, e.recorded_at

    def settle(self, e: RecordedEvent, job: str, state: str, place: int) -> None:
        ev: Any = e.event
        row = self.controls.get((job, ev.control))
        if row is not None:
            value = ev.run_id if place == 7 else ev.reason
            row[6], row[place], row[10] = state, value, e.recorded_at

    def asked(self, e: RecordedEvent, job: str) -> None:
        ev: Any = e.event
        row = [job, ev.request, ev.question, PENDING, None, e.position, e.recorded_at, None]
        self.requests[(job, ev.request)] = row
        self.requests_of.setdefault(job, {})[ev.request] = row

    def next_run(self, e: RecordedEvent, job: str) -> None:
        for row in self.controls_of.get(job, ()):
            if row[6] == PENDING and row[2] in ("steer", "interrupt", "respond"):
                row[6], row[8], row[10] = LOST, "its run ended", e.recorded_at
        self.drop_requests(job)

    def ended(self, e: RecordedEvent, job: str) -> None:
        for row in self.controls_of.get(job, ()):
            if row[6] == PENDING:
                row[6], row[8], row[10] = LOST, f"job {e.state}", e.recorded_at
        self.drop_requests(job)

    def drop_requests(self, job: str) -> None:
        asked = self.requests_of.get(job)
        if asked is None:  # most jobs ask nothing: no empty dict made per start and end
            return
        for row in asked.values():
            if row[3] == PENDING:
                row[3] = DROPPED

    def finish(self) -> None:
        for table, rows in (("controls", self.controls), ("requests", self.requests)):
            if rows:
                marks = ", ".join("?" * len(next(iter(rows.values()))))
                self.cursor.executemany(f"INSERT INTO {table} VALUES ({marks})", rows.values())


def line_of(control: int, ev: Any) -> str:
    """The JSON line a control is given to the run as (without its newline): its id, its
    type, and the fields its action carries."""
    body: dict[str, Any] = {"id": control, "type": ev.action}
    if ev.action in ("message", "steer", "finalize"):
        body["text"] = ev.text
    if ev.turn:
        body["turn"] = ev.turn
    if ev.action == "respond":
        body["request"] = ev.request
        body["response"] = json.loads(ev.response)
    if ev.action == "effort":
        body["effort"] = ev.effort
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
