"""In-memory folds of the domain read models, for the audit's refold (``memory_folder``).

Each one mirrors its projection's ``@handles`` methods on Python lists instead of SQL rows and
writes every row once in ``finish``: a refold of a million events costs one statement per row
instead of one per event. The SQL handlers stay the definition; these must leave the same rows
(``tests/unit/test_memory_folds.py`` folds a log of every event type both ways), and the audit
refolds through the SQL handlers before it reports a disagreement.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from typing import Any

import msgspec

from engine.domain.result import UNREAD
from engine.events import RecordedEvent
from engine.projection import Folder

Fold = Callable[[RecordedEvent, str], None]
"""Folds one event, given the id of the entity its stream belongs to (``j1`` of ``job:j1``)."""
_files = msgspec.json.encode


class Table:
    """One table's rows by primary key, as lists in the table's column order."""

    def __init__(self, cursor: Any, name: str, defaults: dict[str, Any]) -> None:
        self.cursor = cursor
        self.name = name
        info = cursor.execute(f"PRAGMA table_info({name})").fetchall()
        self.columns = {row[1]: i for i, row in enumerate(info)}
        self.blank = [None] * len(info)
        for column, value in defaults.items():
            self.blank[self.columns[column]] = value
        self.rows: dict[Any, list[Any]] = {}

    def insert(self, key: Any, **values: Any) -> None:
        """INSERT: a second row with one key is the constraint error SQL would raise."""
        if key in self.rows:
            raise ValueError(f"UNIQUE constraint failed: {self.name} {key!r}")
        row = list(self.blank)
        for column, value in values.items():
            row[self.columns[column]] = value
        self.rows[key] = row

    def update(self, key: Any, **values: Any) -> list[Any] | None:
        """UPDATE ... WHERE key: nothing when there is no such row."""
        row = self.rows.get(key)
        if row is not None:
            for column, value in values.items():
                row[self.columns[column]] = value
        return row

    def get(self, row: list[Any], column: str) -> Any:
        return row[self.columns[column]]

    def finish(self) -> None:
        marks = ", ".join("?" * len(self.blank))
        self.cursor.executemany(f"INSERT INTO {self.name} VALUES ({marks})", self.rows.values())


def _json_list(items: Any) -> str:
    """``json.dumps(list(items))``, which the handlers store; an empty one is most of them."""
    return json.dumps(list(items)) if items else "[]"


def _folder(table: Table, folds: dict[str, Fold]) -> Folder:
    def feed(e: RecordedEvent) -> None:
        fold = folds.get(e.event_type)
        if fold is not None:
            fold(e, e.stream_id.partition(":")[2])

    return Folder(feed, table.finish, frozenset(folds), lambda: {table.name: table.rows}, folds)


def jobs_folder(cursor: Any) -> Folder:
    """``JobsProjection`` in memory."""
    jobs = Table(cursor, "jobs", {"runs": 0, "files": "[]", "warnings": "[]"})

    def moved(e: RecordedEvent, job: str, **fields: Any) -> None:  # JobsProjection._set
        jobs.update(job, state=e.state, version=e.version, updated_at=e.recorded_at, **fields)

    # The three events of every job, by column index (keyword arguments cost more than
    # the fold itself at a million events).
    at = jobs.columns
    state, version, updated, started_at, runs = (
        at["state"],
        at["version"],
        at["updated_at"],
        at["started_at"],
        at["runs"],
    )
    # `job.accepted` fills a new row: its values, then the blank row's, picked in column order.
    accepted_columns = (
        "job_id", "session_id", "state", "version", "accepted_position", "agent",
        "prompt_file", "command_id", "parent_job", "depth", "batch", "resource_group",
        "units", "write_scope", "task_id", "created_at", "updated_at",
    )  # fmt: skip
    blank = tuple(jobs.blank)
    width = len(accepted_columns)
    picked = {at[c]: i for i, c in enumerate(accepted_columns)}
    new_row = operator.itemgetter(*(picked.get(c, width + c) for c in range(len(blank))))
    run_id, pid, start_token, epoch, token_digest, paused_by = (
        at[c] for c in ("run_id", "pid", "start_token", "epoch", "token_digest", "paused_by")
    )
    result_column, files, exit_code, warnings, finished_at, result_state = (
        at[c] for c in ("result", "files", "exit_code", "warnings", "finished_at", "result_state")
    )
    rows = jobs.rows

    def accepted(e: RecordedEvent, entity: str) -> None:
        ev: Any = e.event
        if entity in rows:
            raise ValueError(f"UNIQUE constraint failed: jobs.job_id {entity!r}")
        at = e.recorded_at
        values = (
            entity, ev.session, e.state, e.version, e.position, ev.agent, ev.prompt_file,
            e.command_id, ev.parent_job, ev.depth, ev.batch, ev.resource_group, ev.units,
            _json_list(ev.write_scope), ev.task, at, at,
        )  # fmt: skip
        rows[entity] = list(new_row(values + blank))

    def started(e: RecordedEvent, entity: str) -> None:
        row = rows.get(entity)
        if row is None:
            return
        ev: Any = e.event
        row[state], row[version], row[updated] = e.state, e.version, e.recorded_at
        row[run_id], row[pid], row[start_token], row[epoch], row[token_digest], row[paused_by] = (
            ev.run_id, ev.pid, ev.start_token, ev.epoch, ev.token_digest, None,
        )  # fmt: skip
        row[runs] += 1
        if row[started_at] is None:
            row[started_at] = e.recorded_at

    def finished(e: RecordedEvent, entity: str) -> None:
        row = rows.get(entity)
        if row is None:
            return
        ev: Any = e.event
        at = e.recorded_at
        row[state], row[version], row[updated] = e.state, e.version, at
        row[result_column], row[files], row[exit_code] = (
            ev.result,
            "[]" if not ev.files else _files(ev.files).decode(),
            ev.exit_code,
        )
        row[warnings], row[finished_at], row[result_state] = _json_list(ev.warnings), at, UNREAD

    def resume_failed(e: RecordedEvent, entity: str) -> None:
        reason = e.event.reason  # type: ignore[attr-defined]
        moved(e, entity, result=reason, reason=reason, finished_at=e.recorded_at)

    def cancelled(e: RecordedEvent, entity: str) -> None:
        reason = e.event.reason or None  # type: ignore[attr-defined]
        moved(e, entity, finished_at=e.recorded_at, **({"reason": reason} if reason else {}))

    def notify_finished(e: RecordedEvent, entity: str) -> None:
        ev: Any = e.event
        moved(
            e,
            entity,
            notify_exit_code=ev.exit_code,
            notify_ms=ev.ms,
            notify_stdout=ev.stdout_tail,
            notify_stderr=ev.stderr_tail,
        )

    def result(e: RecordedEvent, entity: str) -> None:  # result_* only, not the job's state
        ev: Any = e.event
        row = jobs.rows.get(entity)
        if row is None:
            return
        reason, sha256 = getattr(ev, "reason", None), getattr(ev, "sha256", None)
        jobs.update(
            entity,
            result_state=e.state,
            result_reason=jobs.get(row, "result_reason") if reason is None else reason,
            result_sha256=jobs.get(row, "result_sha256") if sha256 is None else sha256,
            updated_at=e.recorded_at,
        )

    folds: dict[str, Fold] = {
        "job.accepted": accepted,
        "job.started": started,
        "job.finished": finished,
        "job.superseded": lambda e, job: moved(
            e,
            job,
            superseded_by=e.event.superseded_by,  # type: ignore[attr-defined]
            finished_at=e.recorded_at,
        ),
        "job.paused": lambda e, job: moved(e, job, paused_by=e.event.by or None),  # type: ignore[attr-defined]
        "job.continued": moved,
        "job.suspended": lambda e, job: moved(e, job, reason=e.event.reason or None),  # type: ignore[attr-defined]
        "job.resume_failed": resume_failed,
        "job.cancel_requested": lambda e, job: moved(e, job, reason=e.event.reason or None),  # type: ignore[attr-defined]
        "job.cancelled": cancelled,
        "job.notify_started": lambda e, job: moved(e, job, notify_pid=e.event.pid),  # type: ignore[attr-defined]
        "job.notify_finished": notify_finished,
        "job.notify_lost": lambda e, job: moved(
            e,
            job,
            notify_exit_code=None,
            notify_ms=0,
            notify_stderr=e.event.reason,  # type: ignore[attr-defined]
        ),
        "result.read": result,
        "result.accepted": result,
        "result.rejected": result,
        "result.integrated": result,
    }
    return _folder(jobs, folds)


def runs_folder(cursor: Any) -> Folder:
    """``RunsProjection`` in memory: rows appear at a start and go at an end."""
    runs = Table(cursor, "runs", {})

    # A start sets every column: the row in column order, built in one step.
    columns = ("kind", "entity_id", "run_id", "pid", "start_token", "epoch", "started_at")
    in_order = operator.itemgetter(*(columns.index(c) for c in runs.columns))
    rows = runs.rows

    def start(kind: str) -> Fold:
        def fold(e: RecordedEvent, entity: str) -> None:  # INSERT OR REPLACE
            ev: Any = e.event
            if kind == "session" and ev.pid <= 0:  # sessions without a controller run nothing
                return
            values = (kind, entity, ev.run_id, ev.pid, ev.start_token, e.epoch, e.recorded_at)
            rows[kind, entity] = list(in_order(values))

        return fold

    def end(kind: str) -> Fold:
        def fold(e: RecordedEvent, entity: str) -> None:  # DELETE
            runs.rows.pop((kind, entity), None)

        return fold

    def session_finished(e: RecordedEvent, entity: str) -> None:
        if e.state != "detached":  # a detached session keeps its controller
            runs.rows.pop(("session", entity), None)

    folds: dict[str, Fold] = {
        "job.started": start("job"),
        **dict.fromkeys(
            ("job.finished", "job.superseded", "job.suspended", "job.cancelled"), end("job")
        ),
        "session.started": start("session"),
        **dict.fromkeys(
            (
                "session.paused",
                "session.suspended",
                "session.resumed",
                "session.stopped",
                "session.cancelled",
            ),
            end("session"),
        ),
        "session.finished": session_finished,
    }
    return _folder(runs, folds)


_SESSION_ENDS = ("completed", "failed", "stopped", "cancelled")


def sessions_folder(cursor: Any) -> Folder:
    """``SessionsProjection`` in memory."""
    sessions = Table(cursor, "sessions", {"tainted": 0, "taint_reasons": "[]"})

    def moved(e: RecordedEvent, session: str, **fields: Any) -> None:  # SessionsProjection._set
        if e.state in _SESSION_ENDS:
            fields["finished_at"] = e.recorded_at
        sessions.update(
            session, state=e.state, version=e.version, updated_at=e.recorded_at, **fields
        )

    def created(e: RecordedEvent, session: str) -> None:
        ev: Any = e.event
        sessions.insert(
            session,
            session_id=session,
            state=e.state,
            version=e.version,
            agent=ev.agent,
            origin=ev.origin,
            resource_group=ev.resource_group,
            units=ev.units,
            has_controller=int(ev.has_controller),
            created_at=e.recorded_at,
            updated_at=e.recorded_at,
        )

    def resumed(e: RecordedEvent, session: str) -> None:
        run_id = e.event.run_id or None  # type: ignore[attr-defined]
        extra = {"run_id": run_id} if run_id else {}
        moved(e, session, pid=None, start_token=None, detached_by=None, **extra)

    def finished(e: RecordedEvent, session: str) -> None:
        extra = {"detached_by": None} if e.state == "detached" else {}
        moved(e, session, requested=None, **extra)

    def tainted(e: RecordedEvent, session: str) -> None:
        row = sessions.rows.get(session)
        if row is None:  # the SQL handler reads the row first, and fails without one
            raise LookupError(f"no session {session!r} to taint")
        reasons = [*json.loads(sessions.get(row, "taint_reasons")), e.event.reason]  # type: ignore[attr-defined]
        moved(e, session, tainted=1, taint_reasons=json.dumps(reasons))

    def owes(e: RecordedEvent, session: str) -> None:
        owed: Any = e.event.owed  # type: ignore[attr-defined]
        moved(e, session, owes_kind=owed.kind, owes_ref=owed.ref)

    def started(e: RecordedEvent, session: str) -> None:
        ev: Any = e.event
        moved(e, session, run_id=ev.run_id, pid=ev.pid, start_token=ev.start_token)

    def finishing(e: RecordedEvent, session: str) -> None:
        ev: Any = e.event
        moved(e, session, requested=ev.requested, error=ev.error or None)

    def controller_gone(e: RecordedEvent, session: str) -> None:
        moved(e, session, pid=None, start_token=None)

    folds: dict[str, Fold] = {
        "session.created": created,
        "session.started": started,
        "session.detached": lambda e, s: moved(e, s, detached_by=e.event.by),  # type: ignore[attr-defined]
        "session.attached": lambda e, s: moved(e, s, detached_by=None),
        "session.paused": controller_gone,
        "session.suspended": controller_gone,
        "session.resumed": resumed,
        "session.finishing": finishing,
        "session.finished": finished,
        **dict.fromkeys(
            ("session.stopping", "session.stopped", "session.cancelling", "session.cancelled"),
            moved,
        ),
        "session.tainted": tainted,
        "session.owes": owes,
        "session.settled": lambda e, s: moved(e, s, owes_kind=None, owes_ref=None),
    }
    return _folder(sessions, folds)


def leases_folder(cursor: Any) -> Folder:
    """``LeasesProjection`` in memory: a tenure replaces the row, a renewal or release moves it."""
    leases = Table(cursor, "leases", {})

    def tenure(e: RecordedEvent, name: str) -> None:  # INSERT ... ON CONFLICT DO UPDATE
        ev: Any = e.event
        leases.rows.pop(name, None)  # every column but the key is set again
        leases.insert(
            name,
            name=name,
            state=e.state,
            version=e.version,
            holder=ev.holder,
            host=ev.host,
            pid=ev.pid,
            epoch=ev.epoch,
            acquired_at=e.recorded_at,
            renewed_at=e.recorded_at,
            updated_at=e.recorded_at,
        )

    def touch(e: RecordedEvent, name: str) -> None:
        at = e.recorded_at
        leases.update(name, state=e.state, version=e.version, renewed_at=at, updated_at=at)

    folds: dict[str, Fold] = {
        "lease.acquired": tenure,
        "lease.taken_over": tenure,
        "lease.renewed": touch,
        "lease.released": touch,
        "lease.new_log": touch,
    }
    return _folder(leases, folds)
