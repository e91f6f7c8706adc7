"""Every stream id and prefixed key of the built-in domain, built and taken apart in one place.

A stream id is ``kind:entity`` (``job:j1``); an ``/invocations`` request's idempotency key is
stored as the command id ``inv:<key>``.
"""

from __future__ import annotations

INVOCATION_PREFIX = "inv:"


def lease(name: str) -> str:
    return f"lease:{name}"


def session(session_id: str) -> str:
    return f"session:{session_id}"


def job(job_id: str) -> str:
    return f"job:{job_id}"


def task(task_id: str) -> str:
    return f"task:{task_id}"


def push(delivery_id: str) -> str:
    """One owed push notification's delivery trail (``engine.domain.push``)."""
    return f"push:{delivery_id}"


def result(job_id: str) -> str:
    """A job's result disposition (``engine.domain.result``)."""
    return f"result:{job_id}"


def audit(session_id: str) -> str:
    """A session's refused spawns, controls and integrates (``engine.domain.refusals``)."""
    return f"audit:{session_id}"


def entity_of(stream_id: str) -> str:
    """``j1`` for ``job:j1``: the id of the entity a stream belongs to."""
    return stream_id.partition(":")[2]


def kind_of(stream_id: str) -> str:
    """``job`` for ``job:j1``."""
    return stream_id.partition(":")[0]


def a2a_command(message_id: str) -> str:
    """The command id under which an A2A message (its ``messageId``) is recorded."""
    return f"a2a:{message_id}"


def invocation_command(key: str) -> str:
    """The command id under which an ``/invocations`` request with this key is recorded."""
    return INVOCATION_PREFIX + key


def invocation_key(command_id: str | None) -> str | None:
    """The caller's key back from a command id; None for a command of another origin."""
    if command_id is None or not command_id.startswith(INVOCATION_PREFIX):
        return None
    return command_id[len(INVOCATION_PREFIX) :]
