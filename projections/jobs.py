"""Read model: every job, its lineage, run, result and notify record."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from engine.domain import ids
from engine.domain.job import (
    JobAccepted,
    JobCancelled,
    JobCancelRequested,
    JobContinued,
    JobFinished,
    JobNotifyFinished,
    JobNotifyLost,
    JobNotifyStarted,
    JobPaused,
    JobResumeFailed,
    JobStarted,
    JobSuperseded,
    JobSuspended,
)
from engine.domain.result import (
    UNREAD,
    ResultAccepted,
    ResultIntegrated,
    ResultRead,
    ResultRejected,
)
from engine.events import RecordedEvent
from engine.projection import DispatchProjection, Folder, handles
from projections import memory

TERMINAL = ("ok", "error", "superseded", "cancelled")


class JobsProjection(DispatchProjection):
    name = "jobs"
    version = 3  # 2: task_id column; 3: run token digest and result disposition
    tables = ("jobs",)
    folds_by_entity = True  # every row from its own entity's streams
    ddl = """
        CREATE TABLE jobs (
            job_id            TEXT    PRIMARY KEY,
            session_id        TEXT    NOT NULL,
            state             TEXT    NOT NULL,
            version           INTEGER NOT NULL,
            accepted_position INTEGER NOT NULL,
            agent             TEXT    NOT NULL,
            prompt_file       TEXT    NOT NULL,
            command_id        TEXT,
            parent_job        TEXT,
            depth             INTEGER NOT NULL,
            batch             TEXT,
            resource_group    TEXT,
            units             INTEGER NOT NULL,
            write_scope       TEXT    NOT NULL,
            task_id           TEXT,
            run_id            TEXT,
            pid               INTEGER,
            start_token       TEXT,
            epoch             INTEGER,
            runs              INTEGER NOT NULL DEFAULT 0,
            result            TEXT,
            files             TEXT    NOT NULL DEFAULT '[]',
            exit_code         INTEGER,
            warnings          TEXT    NOT NULL DEFAULT '[]',
            token_digest      TEXT,
            paused_by         TEXT,
            result_state      TEXT,
            result_reason     TEXT,
            result_sha256     TEXT,
            superseded_by     TEXT,
            reason            TEXT,
            notify_pid        INTEGER,
            notify_exit_code  INTEGER,
            notify_ms         INTEGER,
            notify_stdout     TEXT,
            notify_stderr     TEXT,
            created_at        TEXT    NOT NULL,
            started_at        TEXT,
            finished_at       TEXT,
            updated_at        TEXT    NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX jobs_by_session ON jobs (session_id, state);
        CREATE INDEX jobs_by_state ON jobs (state, updated_at);
        CREATE INDEX jobs_by_parent ON jobs (parent_job);
        CREATE INDEX jobs_by_group ON jobs (resource_group, state);
        CREATE INDEX jobs_by_command ON jobs (command_id);
        CREATE INDEX jobs_by_task ON jobs (task_id) WHERE task_id IS NOT NULL;
        CREATE INDEX jobs_by_token ON jobs (token_digest) WHERE token_digest IS NOT NULL;
        CREATE INDEX jobs_by_update ON jobs (updated_at);
        CREATE INDEX jobs_notifying ON jobs (job_id)
            WHERE notify_pid IS NOT NULL AND notify_ms IS NULL;
    """

    @staticmethod
    def _id(e: RecordedEvent) -> str:
        return ids.entity_of(e.stream_id)

    def memory_folder(self, cursor: Any) -> Folder:
        return memory.jobs_folder(cursor)

    def _set(self, cur: Any, e: RecordedEvent, **fields: Any) -> None:
        columns = {"state": e.state, "version": e.version, "updated_at": e.recorded_at, **fields}
        assignments = ", ".join(f"{name} = ?" for name in columns)
        cur.execute(
            f"UPDATE jobs SET {assignments} WHERE job_id = ?", (*columns.values(), self._id(e))
        )

    @handles(JobAccepted)
    def on_job_accepted(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "INSERT INTO jobs (job_id, session_id, state, version, accepted_position, agent,"
            " prompt_file, command_id, parent_job, depth, batch, resource_group, units,"
            " write_scope, task_id, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self._id(e),
                ev.session,
                e.state,
                e.version,
                e.position,
                ev.agent,
                ev.prompt_file,
                e.command_id,
                ev.parent_job,
                ev.depth,
                ev.batch,
                ev.resource_group,
                ev.units,
                json.dumps(list(ev.write_scope)),
                ev.task,
                e.recorded_at,
                e.recorded_at,
            ),
        )

    @handles(JobStarted)
    def on_job_started(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "UPDATE jobs SET state = ?, version = ?, updated_at = ?, run_id = ?, pid = ?,"
            " start_token = ?, epoch = ?, token_digest = ?, paused_by = NULL, runs = runs + 1,"
            " started_at = coalesce(started_at, ?) WHERE job_id = ?",
            (
                e.state,
                e.version,
                e.recorded_at,
                ev.run_id,
                ev.pid,
                ev.start_token,
                ev.epoch,
                ev.token_digest,
                e.recorded_at,
                self._id(e),
            ),
        )

    @handles(JobFinished)
    def on_job_finished(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        self._set(
            cur,
            e,
            result=ev.result,
            files=msgspec.json.encode(ev.files).decode(),
            exit_code=ev.exit_code,
            warnings=json.dumps(list(ev.warnings)),
            finished_at=e.recorded_at,
            result_state=UNREAD,
        )

    @handles(JobSuperseded)
    def on_job_superseded(self, cur: Any, e: RecordedEvent) -> None:
        self._set(
            cur,
            e,
            superseded_by=e.event.superseded_by,  # type: ignore[attr-defined]
            finished_at=e.recorded_at,
        )

    @handles(JobPaused)
    def on_job_paused(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e, paused_by=e.event.by or None)  # type: ignore[attr-defined]

    @handles(JobContinued)
    def on_job_continued(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e)

    @handles(JobSuspended)
    def on_job_suspended(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e, reason=e.event.reason or None)  # type: ignore[attr-defined]

    @handles(JobResumeFailed)
    def on_job_resume_failed(self, cur: Any, e: RecordedEvent) -> None:
        reason = e.event.reason  # type: ignore[attr-defined]
        self._set(cur, e, result=reason, reason=reason, finished_at=e.recorded_at)

    @handles(JobCancelRequested)
    def on_job_cancel_requested(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e, reason=e.event.reason or None)  # type: ignore[attr-defined]

    @handles(JobCancelled)
    def on_job_cancelled(self, cur: Any, e: RecordedEvent) -> None:
        reason = e.event.reason or None  # type: ignore[attr-defined]
        self._set(cur, e, finished_at=e.recorded_at, **({"reason": reason} if reason else {}))

    @handles(JobNotifyStarted)
    def on_job_notify_started(self, cur: Any, e: RecordedEvent) -> None:
        self._set(cur, e, notify_pid=e.event.pid)  # type: ignore[attr-defined]

    @handles(JobNotifyFinished)
    def on_job_notify_finished(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        self._set(
            cur,
            e,
            notify_exit_code=ev.exit_code,
            notify_ms=ev.ms,
            notify_stdout=ev.stdout_tail,
            notify_stderr=ev.stderr_tail,
        )

    @handles(JobNotifyLost)
    def on_job_notify_lost(self, cur: Any, e: RecordedEvent) -> None:
        # A hook that ended without an exit code: lost to a crash (a hook killed at its cap
        # has one). Kept in the version-2 columns, so no refold of existing logs is needed.
        self._set(
            cur,
            e,
            notify_exit_code=None,
            notify_ms=0,
            notify_stderr=e.event.reason,  # type: ignore[attr-defined]
        )

    @handles(ResultRead, ResultAccepted, ResultRejected, ResultIntegrated)
    def on_result(self, cur: Any, e: RecordedEvent) -> None:
        # The result stream is a sub-state: it moves result_* only, never the job's own
        # state and version (those belong to the job stream).
        ev: Any = e.event
        cur.execute(
            "UPDATE jobs SET result_state = ?, result_reason = coalesce(?, result_reason),"
            " result_sha256 = coalesce(?, result_sha256), updated_at = ? WHERE job_id = ?",
            (
                e.state,
                getattr(ev, "reason", None),
                getattr(ev, "sha256", None),
                e.recorded_at,
                self._id(e),
            ),
        )
