"""Read model: push configs and the outbox (ADR 0039).

A task event that moves the task to another state owes every config of the task one delivery,
deduplicated by the event (its position): the outbox row is written by this fold, in the same
transaction as the event. The row copies its config (a config deleted later takes nothing
back that was owed) and the task's state and status text then, so what is sent says what
happened at that transition, whenever it goes out. The delivery's own events
(``engine.domain.push``) move the row along: ``queued`` -> ``sending`` -> ``waiting`` ... ->
``delivered`` or ``dead``.
"""

from __future__ import annotations

from typing import Any

from engine.domain import ids
from engine.domain.push import (
    PushAttemptStarted,
    PushDead,
    PushDelivered,
    PushFailed,
    TaskPushConfigDeleted,
    TaskPushConfigSet,
    delivery_id,
)
from engine.domain.retention import EntityRetired
from engine.domain.task import (
    TaskAuthRequired,
    TaskCanceled,
    TaskCompleted,
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

QUEUED, SENDING, WAITING, DELIVERED, DEAD = "queued", "sending", "waiting", "delivered", "dead"
OWED = (QUEUED, SENDING, WAITING)


class PushProjection(DispatchProjection):
    name = "push"
    version = 1
    tables = ("push_configs", "push_outbox")
    folds_by_entity = True  # every row from its task's streams and its deliveries' (their ids
    # end in the task's id: engine.domain.push.delivery_id)
    ddl = """
        CREATE TABLE push_configs (
            task_id     TEXT    NOT NULL,
            config_id   TEXT    NOT NULL,
            url         TEXT    NOT NULL,
            token       TEXT    NOT NULL,
            scheme      TEXT    NOT NULL,
            credentials TEXT    NOT NULL,
            dialect     TEXT    NOT NULL,
            position    INTEGER NOT NULL,  -- of the event that set it
            last_state  TEXT    NOT NULL,  -- the task state it was last told of
            PRIMARY KEY (config_id, task_id)  -- the task last: an audit shares rows by it
        ) WITHOUT ROWID;
        CREATE INDEX push_configs_by_task ON push_configs (task_id, position);
        CREATE TABLE push_outbox (
            delivery_id TEXT    PRIMARY KEY,  -- cause position, config position, task id
            task_id     TEXT    NOT NULL,
            config_id   TEXT    NOT NULL,
            cause       INTEGER NOT NULL,
            task_state  TEXT    NOT NULL,
            status_text TEXT,
            at          TEXT    NOT NULL,
            url         TEXT    NOT NULL,
            token       TEXT    NOT NULL,
            scheme      TEXT    NOT NULL,
            credentials TEXT    NOT NULL,
            dialect     TEXT    NOT NULL,
            progress    TEXT    NOT NULL,
            attempts    INTEGER NOT NULL,
            due_at      TEXT    NOT NULL,
            holder      TEXT,
            claim_until TEXT,
            last_status INTEGER,
            last_error  TEXT,
            settled_at  TEXT
        ) WITHOUT ROWID;
        CREATE INDEX push_outbox_owed ON push_outbox (progress, due_at);
        CREATE INDEX push_outbox_by_task ON push_outbox (task_id, cause);
    """

    @handles(EntityRetired)
    def on_retired(self, cur: Any, e: RecordedEvent) -> None:
        delete_retired(cur, e, "push", "push_outbox", "delivery_id")  # ADR 0062

    @handles(TaskPushConfigSet)
    def on_config_set(self, cur: Any, e: RecordedEvent) -> None:
        config: Any = e.event.config  # type: ignore[attr-defined]
        task_id = ids.entity_of(e.stream_id)
        cur.execute(
            "DELETE FROM push_configs WHERE task_id = ? AND config_id = ?",
            (task_id, config.config_id),
        )
        cur.execute(
            "INSERT INTO push_configs (task_id, config_id, url, token, scheme, credentials,"
            " dialect, position, last_state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                task_id,
                config.config_id,
                config.url,
                config.token,
                config.scheme,
                config.credentials,
                config.dialect,
                e.position,
                e.state,
            ),
        )

    @handles(TaskPushConfigDeleted)
    def on_config_deleted(self, cur: Any, e: RecordedEvent) -> None:
        cur.execute(
            "DELETE FROM push_configs WHERE task_id = ? AND config_id = ?",
            (ids.entity_of(e.stream_id), e.event.config_id),  # type: ignore[attr-defined]
        )

    @handles(
        TaskStatusUpdated,
        TaskMessageAdded,
        TaskInputRequired,
        TaskAuthRequired,
        TaskCompleted,
        TaskFailed,
        TaskCanceled,
        TaskRejected,
    )
    def _transition(self, cur: Any, e: RecordedEvent) -> None:
        task_id = ids.entity_of(e.stream_id)
        told = cur.execute(
            "SELECT config_id, url, token, scheme, credentials, dialect, position"
            " FROM push_configs WHERE task_id = ? AND last_state <> ? ORDER BY position",
            (task_id, e.state),
        ).fetchall()
        if not told:
            return
        text = _status_text(e)
        for config_id, url, token, scheme, credentials, dialect, position in told:
            cur.execute(
                "INSERT INTO push_outbox (delivery_id, task_id, config_id, cause, task_state,"
                " status_text, at, url, token, scheme, credentials, dialect, progress,"
                " attempts, due_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
                (
                    delivery_id(e.position, position, task_id),
                    task_id,
                    config_id,
                    e.position,
                    e.state,
                    text,
                    e.recorded_at,
                    url,
                    token,
                    scheme,
                    credentials,
                    dialect,
                    QUEUED,
                    e.recorded_at,
                ),
            )
        cur.execute(
            "UPDATE push_configs SET last_state = ? WHERE task_id = ? AND last_state <> ?",
            (e.state, task_id, e.state),
        )

    @handles(PushAttemptStarted)
    def on_attempt_started(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "UPDATE push_outbox SET progress = ?, attempts = ?, holder = ?, claim_until = ?"
            " WHERE delivery_id = ?",
            (SENDING, ev.attempt, ev.holder, ev.until, ids.entity_of(e.stream_id)),
        )

    @handles(PushFailed)
    def on_failed(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        cur.execute(
            "UPDATE push_outbox SET progress = ?, due_at = ?, holder = NULL, claim_until = NULL,"
            " last_status = ?, last_error = ? WHERE delivery_id = ?",
            (WAITING, ev.retry_at, ev.status, ev.error, ids.entity_of(e.stream_id)),
        )

    @handles(PushDelivered, PushDead)
    def _settled(self, cur: Any, e: RecordedEvent) -> None:
        ev: Any = e.event
        progress = DELIVERED if isinstance(ev, PushDelivered) else DEAD
        error = getattr(ev, "reason", None)
        cur.execute(
            "UPDATE push_outbox SET progress = ?, holder = NULL, claim_until = NULL,"
            " last_status = ?, last_error = COALESCE(?, last_error), settled_at = ?"
            " WHERE delivery_id = ?",
            (progress, ev.status, error, e.recorded_at, ids.entity_of(e.stream_id)),
        )


def _status_text(e: RecordedEvent) -> str | None:
    """The agent's status message at the transition, as GetTask says it: a completion's
    warnings or result, a status's text; a follow-up's text is the caller's, not a status."""
    event: Any = e.event
    if isinstance(event, TaskCompleted):
        return completed_status(event) or event.result
    if isinstance(event, TaskMessageAdded):
        return None
    return getattr(event, "text", None) or None
