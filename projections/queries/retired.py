"""Reads of the ``retired`` read model (``projections.retired``, ADR 0062): whether a policy
retired an entity, and which one an idempotency key made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from engine.domain.job import TERMINAL as JOB_TERMINAL
from engine.domain.push import PushState
from engine.domain.retention import RetiredRow
from engine.domain.session import TERMINAL as SESSION_TERMINAL
from engine.domain.task import TERMINAL as TASK_TERMINAL
from projections.rows import select_one


def retired(conn: Any, kind: str, entity_id: str) -> RetiredRow | None:
    """The retirement of ``kind:entity_id``, None when it was not retired."""
    return select_one(conn, RetiredRow, "WHERE entity_id = ? AND kind = ?", entity_id, kind)


def retired_of_command(conn: Any, kind: str, command_id: str) -> str | None:
    """The retired entity of ``kind`` that ``command_id`` (its idempotency key) made."""
    rows = conn.execute(
        "SELECT entity_id FROM retired WHERE command_id = ? AND kind = ?", (command_id, kind)
    ).fetchall()
    return str(rows[0][0]) if rows else None


@dataclass(frozen=True)
class Policy:
    """How one machine's ended entities are found in its read model (ADR 0062): the table and
    its id column, the state column and the machine's terminal states, the column of the last
    change, the idempotency key column (None: the machine has none), and what still needs an
    ended row (``kept_while``: a SQL condition on ``r``, the row, true while it must stay)."""

    kind: str
    plural: str  # the CLI's --<plural>-older-than and the output's list
    table: str
    key: str
    state: str
    terminal: frozenset[str]
    changed_at: str
    command: str | None = None
    kept_while: str | None = None


def _in(states: frozenset[str]) -> str:
    return "(" + ", ".join(f"'{s}'" for s in sorted(states)) + ")"  # StrEnum values: no quotes


_JOB_ENDED = _in(JOB_TERMINAL)
_TASK_ENDED = _in(TASK_TERMINAL)
PUSH_TERMINAL = frozenset({PushState.DELIVERED, PushState.DEAD})
_PUSH_ENDED = _in(PUSH_TERMINAL)

POLICIES: dict[str, Policy] = {
    policy.kind: policy
    for policy in (
        Policy(
            kind="job",
            plural="jobs",
            table="jobs",
            key="job_id",
            state="state",
            terminal=JOB_TERMINAL,
            changed_at="updated_at",
            command="command_id",
            # A job below a live one is still read by its subtree's quiet gate (ADR 0050).
            kept_while="EXISTS (SELECT 1 FROM jobs c WHERE c.parent_job = r.job_id"
            f" AND c.state NOT IN {_JOB_ENDED})",
        ),
        Policy(
            kind="task",
            plural="tasks",
            table="tasks",
            key="task_id",
            state="state",
            terminal=TASK_TERMINAL,
            changed_at="updated_at",
            # A task whose deliveries are still owed is still read by the push sender.
            kept_while="EXISTS (SELECT 1 FROM push_outbox o WHERE o.task_id = r.task_id"
            f" AND o.progress NOT IN {_PUSH_ENDED})",
        ),
        Policy(
            kind="push",
            plural="pushes",
            table="push_outbox",
            key="delivery_id",
            state="progress",
            terminal=PUSH_TERMINAL,
            changed_at="settled_at",
        ),
        Policy(
            kind="session",
            plural="sessions",
            table="sessions",
            key="session_id",
            state="state",
            terminal=SESSION_TERMINAL,
            changed_at="updated_at",
            # A session with a live job or task is still the home of their runs and answers.
            kept_while="EXISTS (SELECT 1 FROM jobs j WHERE j.session_id = r.session_id"
            f" AND j.state NOT IN {_JOB_ENDED}) OR EXISTS (SELECT 1 FROM tasks t"
            f" WHERE t.session_id = r.session_id AND t.state NOT IN {_TASK_ENDED})",
        ),
    )
}
"""The machines whose ended rows a policy may retire, in the order a run retires them (a
session last: its jobs and tasks are what keep it)."""


class Retirable(msgspec.Struct, frozen=True):
    """An ended entity a policy may retire: its id, state, last change and idempotency key."""

    entity_id: str
    state: str
    ended_at: str
    command_id: str | None


def retirable(conn: Any, policy: Policy, ended_before: str, limit: int) -> list[Retirable]:
    """``policy``'s ended entities whose row last changed before ``ended_before`` and that
    nothing still needs (``Policy.kept_while``), oldest first, at most ``limit``."""
    p = policy
    command = f"r.{p.command}" if p.command else "NULL"
    kept = f" AND NOT ({p.kept_while})" if p.kept_while else ""
    rows = conn.execute(
        f"SELECT r.{p.key}, r.{p.state}, r.{p.changed_at}, {command} FROM {p.table} r"
        f" WHERE r.{p.state} IN {_in(p.terminal)} AND r.{p.changed_at} < ?{kept}"
        f" ORDER BY r.{p.changed_at}, r.{p.key} LIMIT ?",
        (ended_before, limit),
    ).fetchall()
    return [Retirable(*row) for row in rows]


def newest_epoch(conn: Any) -> int:
    """The epoch of the log's last event (0 when empty): a maintenance writer appends under
    the tenure in force."""
    rows = conn.execute("SELECT epoch FROM events ORDER BY position DESC LIMIT 1").fetchall()
    return int(rows[0][0]) if rows else 0
