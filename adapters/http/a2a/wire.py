"""A2A v1.0 wire shapes built from the read models: the Task, its status, its artifact and the
stream events (ProtoJSON: camelCase, ``TASK_STATE_*`` and ``ROLE_*`` enum names, parts without
a ``kind``), as the official ``a2a-sdk`` client parses them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.domain.rows import TaskRow
from engine.domain.task import TaskState as T

# The A2A wire name of each task state: TASK_STATE_ and the state's own name.
STATE: dict[str, str] = {state: f"TASK_STATE_{state.name}" for state in T}
STATE_BY_NAME = {name: state for state, name in STATE.items()}


def message(message_id: str, role: str, text: str, task_id: str, context: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "contextId": context,
        "taskId": task_id,
        "role": role,
        "parts": [{"text": text}],
    }


def artifact_id(task_id: str) -> str:
    """The one artifact of a task: its result, streamed in chunks while the run goes on."""
    return f"{task_id}-result"


def artifact(task_id: str, text: str, files: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The result artifact: its text, then one part per ``MEDIA:`` file (``result_files``)."""
    parts = [{"text": text}, *(files or ())]
    return {"artifactId": artifact_id(task_id), "name": "result", "parts": parts}


def status_json(
    task_id: str, context: str, state: T, reply: str | None, timestamp: str
) -> dict[str, Any]:
    """A ``TaskStatus``: the state, when, and the agent's message if it said one."""
    status: dict[str, Any] = {"state": STATE[state], "timestamp": timestamp}
    if reply:
        status["message"] = message(f"{task_id}-status", "ROLE_AGENT", reply, task_id, context)
    return status


# A completed task's file parts (``result_files.Parts``): inline bytes, URLs, or descriptions
# of files not sent, per answer.
FileParts = Callable[[TaskRow], list[dict[str, Any]]]


def task_json(
    record: TaskRow, history_length: int | None = None, files: FileParts | None = None
) -> dict[str, Any]:
    task_id, context, state = record.task_id, record.session_id, record.state
    status_text, result, updated = record.status_text, record.result, record.updated_at
    # A completed task's status message is its result, or what it warned of (mmo's
    # "completed with warnings"); the result is always the artifact.
    reply = (status_text or result) if state == T.COMPLETED else status_text
    status = status_json(task_id, context, T(state), reply, updated)
    task: dict[str, Any] = {"id": task_id, "contextId": context, "status": status}
    if state == T.COMPLETED:
        parts = files(record) if files is not None and record.files else None
        task["artifacts"] = [artifact(task_id, result or "", parts)]
    history = [
        message(mid or f"{task_id}-in-{n}", "ROLE_USER", said, task_id, context)
        for n, (mid, said) in enumerate(record.messages())
    ]
    if history_length is not None:
        history = history[len(history) - history_length :] if history_length else []
    if history:
        task["history"] = history
    return task


def status_update(record: TaskRow) -> dict[str, Any]:
    """A ``TaskStatusUpdateEvent`` (1.0 has no ``final`` flag: the stream's end says it)."""
    status = task_json(record)["status"]
    update = {"taskId": record.task_id, "contextId": record.session_id, "status": status}
    return {"statusUpdate": update}


def artifact_update(
    task_id: str,
    context: str,
    text: str,
    *,
    append: bool,
    last_chunk: bool,
    files: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``TaskArtifactUpdateEvent``: ``append`` adds the part to the artifact the client
    holds, otherwise the part replaces it; ``lastChunk`` says the artifact is whole."""
    return {
        "artifactUpdate": {
            "taskId": task_id,
            "contextId": context,
            "artifact": artifact(task_id, text, files),
            "append": append,
            "lastChunk": last_chunk,
        }
    }
