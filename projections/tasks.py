"""Read model: every A2A task and its latest status text."""

from __future__ import annotations

from typing import Any

import msgspec

from engine.domain import answer, ids
from engine.domain.push import TaskPushConfigDeleted, TaskPushConfigSet
from engine.domain.retention import EntityRetired
from engine.domain.task import (
    TaskArtifactUpdated,
    TaskAuthRequired,
    TaskCanceled,
    TaskCompleted,
    TaskCreated,
    TaskFailed,
    TaskInputRequired,
    TaskMessageAdded,
    TaskRejected,
    TaskStatusUpdated,
    completed_status,
)
from engine.events import RecordedEvent
from engine.projection import DispatchProjection, handles
from projections.retired import delete_retired


class TasksProjection(DispatchProjection):
    name = "tasks"
    # 2: follow-ups (ADR 0024); 3: a completed task's status text is its warnings; 4: its files
    # and, for push configs (ADR 0039), its version only; 5: the run's artifacts and reply
    # (ADR 0054); 6: whether the result is JSON its contract accepted (ADR 0065)
    version = 6
    tables = ("tasks",)
    folds_by_entity = True  # every row from its own entity's streams
    ddl = """
        CREATE TABLE tasks (
            task_id     TEXT    PRIMARY KEY,
            session_id  TEXT    NOT NULL,
            state       TEXT    NOT NULL,
            version     INTEGER NOT NULL,
            message_id  TEXT    NOT NULL,
            text        TEXT    NOT NULL,
            status_text TEXT,
            result      TEXT,
            followups   TEXT    NOT NULL DEFAULT '[]',  -- [[message_id, text], ...] in order
            files       TEXT    NOT NULL DEFAULT '[]',  -- the MEDIA files of the result
            artifacts   TEXT    NOT NULL DEFAULT '[]',  -- the run's own artifacts, as chunked
            reply       TEXT    NOT NULL DEFAULT 'null',  -- a direct message's parts
            structured  INTEGER NOT NULL DEFAULT 0,  -- the result is valid JSON (ADR 0065)
            created_at  TEXT    NOT NULL,
            updated_at  TEXT    NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX tasks_by_session ON tasks (session_id, created_at);
        CREATE INDEX tasks_by_state ON tasks (state, updated_at);
        CREATE INDEX tasks_by_update ON tasks (updated_at);
    """

    @staticmethod
    def _id(e: RecordedEvent) -> str:
        return ids.entity_of(e.stream_id)

    @handles(EntityRetired)
    def on_retired(self, cur: Any, e: RecordedEvent) -> None:
        delete_retired(cur, e, "task", "tasks", "task_id")  # ADR 0062

    @handles(TaskCreated)
    def on_task_created(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "INSERT INTO tasks (task_id, session_id, state, version, message_id, text,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self._id(e),
                ev.context,
                e.state,
                e.version,
                ev.message_id,
                ev.text,
                e.recorded_at,
                e.recorded_at,
            ),
        )

    @handles(
        TaskStatusUpdated,
        TaskInputRequired,
        TaskAuthRequired,
        TaskFailed,
        TaskCanceled,
        TaskRejected,
    )
    def _status(self, cur: Any, e: RecordedEvent) -> None:
        cur.execute(
            "UPDATE tasks SET state = ?, version = ?, status_text = ?, updated_at = ?"
            " WHERE task_id = ?",
            (e.state, e.version, e.event.text, e.recorded_at, self._id(e)),  # type: ignore[attr-defined]
        )

    @handles(TaskPushConfigSet, TaskPushConfigDeleted)
    def _config(self, cur: Any, e: RecordedEvent) -> None:
        # Nothing shown changes (ADR 0039), but the row's version stays the stream's: If-Match
        # and a planned follow-up compare with it.
        cur.execute("UPDATE tasks SET version = ? WHERE task_id = ?", (e.version, self._id(e)))

    @handles(TaskMessageAdded)
    def on_task_message_added(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "UPDATE tasks SET state = ?, version = ?, updated_at = ?,"
            " followups = json_insert(followups, '$[#]', json_array(?, ?)) WHERE task_id = ?",
            (e.state, e.version, e.recorded_at, ev.message_id, ev.text, self._id(e)),
        )

    @handles(TaskCompleted)
    def on_task_completed(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        status = completed_status(ev)  # NULL: the status message is the result
        files = msgspec.json.encode(ev.files).decode() if ev.files else "[]"
        reply = msgspec.json.encode(ev.reply).decode()  # "null": no direct message
        at, task = e.recorded_at, self._id(e)
        cur.execute(
            "UPDATE tasks SET state = ?, version = ?, result = ?,"
            " status_text = ?, files = ?, reply = ?, structured = ?, updated_at = ?"
            " WHERE task_id = ?",
            (e.state, e.version, ev.result, status, files, reply, int(ev.structured), at, task),
        )

    @handles(TaskArtifactUpdated)
    def on_artifact_updated(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        (stored,) = cur.execute(
            "SELECT artifacts FROM tasks WHERE task_id = ?", (self._id(e),)
        ).fetchone()
        artifacts = answer.folded(
            msgspec.json.decode(stored, type=tuple[answer.Artifact, ...]),
            ev.artifact_id,
            ev.parts,
            append=ev.append,
            name=ev.name,
            description=ev.description,
        )
        cur.execute(
            # The status, and its timestamp (ListTasks' order), stay as they are.
            "UPDATE tasks SET version = ?, artifacts = ? WHERE task_id = ?",
            (e.version, msgspec.json.encode(artifacts).decode(), self._id(e)),
        )
