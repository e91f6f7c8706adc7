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
from engine.events import RecordedEvent
from engine.projection import DispatchProjection, handles

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
