"""A2A v1.0 wire shapes built from the read models: the Task, its status, its artifact and the
stream events (ProtoJSON: camelCase, ``TASK_STATE_*`` and ``ROLE_*`` enum names, parts without
a ``kind``), as the official ``a2a-sdk`` client parses them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from engine.domain.answer import Artifact, Part, raw_size
from engine.domain.rows import TaskRow
from engine.domain.task import TaskState as T

# The A2A wire name of each task state: TASK_STATE_ and the state's own name.
STATE: dict[str, str] = {state: f"TASK_STATE_{state.name}" for state in T}
STATE_BY_NAME = {name: state for state, name in STATE.items()}


def message(
    message_id: str,
    role: str,
    text: str,
    task_id: str,
    context: str,
    parts: tuple[Part, ...] | None = None,
) -> dict[str, Any]:
    """A ``Message`` of ``text``, or of ``parts`` when given (a run's direct answer)."""
    return {
        "messageId": message_id,
        "contextId": context,
        "taskId": task_id,
        "role": role,
        "parts": [{"text": text}] if parts is None else [part_json(p) for p in parts],
    }


def part_json(part: Part) -> dict[str, Any]:
    """A run's part (ADR 0054) as a 1.0 ``Part``: ``text``, ``data``, or a file by ``raw``
    bytes or ``url``, with its ``filename`` and ``mediaType``."""
    if part.text is not None:
        return {"text": part.text}
    if part.data is not None:
        return {"data": part.data}
    out: dict[str, Any] = {"raw": part.raw} if part.raw is not None else {"url": part.url}
    if part.filename is not None:
        out["filename"] = part.filename
    if part.media_type is not None:
        out["mediaType"] = part.media_type
    return out


def artifact_json(artifact: Artifact) -> dict[str, Any]:
    """An artifact a run made (ADR 0054), as a 1.0 ``Artifact``."""
    out: dict[str, Any] = {"artifactId": artifact.artifact_id}
    if artifact.name:
        out["name"] = artifact.name
    if artifact.description:
        out["description"] = artifact.description
    out["parts"] = [part_json(p) for p in artifact.parts]
    return out


def reply_json(record: TaskRow) -> dict[str, Any]:
    """The direct message a task's run answered with (``record.reply`` set)."""
    return message(
        f"{record.task_id}-reply",
        "ROLE_AGENT",
        "",
        record.task_id,
        record.session_id,
        record.reply or (),
    )


def has_result(record: TaskRow) -> bool:
    """Whether a completed task has its ``result`` artifact: always, unless its run answered
    with a message (the message is the answer), or made artifacts of its own and left no
    result text or files (an empty result beside them would say nothing)."""
    if record.state != T.COMPLETED or record.reply is not None:
        return False
    return not record.artifacts or bool(record.result) or bool(record.files)


def artifact_id(task_id: str) -> str:
    """The one artifact of a task: its result, streamed in chunks while the run goes on."""
    return f"{task_id}-result"


def data_parts(record: TaskRow) -> list[dict[str, Any]]:
    """The result as a data part, when its agent's output contract accepted it (ADR 0065) and
    it is a JSON object (what a data part holds); none otherwise."""
    if not record.structured or record.result is None:
        return []
    data = json.loads(record.result)  # it parsed when the run ended
    return [{"data": data}] if isinstance(data, dict) else []


def artifact(task_id: str, text: str, files: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The result artifact: its text, then its data part (``data_parts``) and one part per
    ``MEDIA:`` file (``result_files``)."""
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
    if record.reply is not None:  # the run answered with a message: its parts, not its text
        status["message"] = reply_json(record)
    task: dict[str, Any] = {"id": task_id, "contextId": context, "status": status}
    artifacts = [artifact_json(a) for a in record.artifacts]
    if has_result(record):
        parts = files(record) if files is not None and record.files else []
        artifacts.append(artifact(task_id, result or "", data_parts(record) + parts))
    if artifacts:
        task["artifacts"] = artifacts
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


def chunk_update(
    task_id: str,
    context: str,
    artifact: Artifact,
    *,
    append: bool,
    last_chunk: bool,
) -> dict[str, Any]:
    """A ``TaskArtifactUpdateEvent`` of a chunk a run made (ADR 0054), with its own
    boundaries: ``artifact`` holds the chunk's parts only."""
    return {
        "artifactUpdate": {
            "taskId": task_id,
            "contextId": context,
            "artifact": artifact_json(artifact),
            "append": append,
            "lastChunk": last_chunk,
        }
    }


def send_result(
    record: TaskRow, history_length: int | None, files: FileParts | None
) -> dict[str, Any]:
    """A blocking SendMessage's result: the Task, or the Message its run answered with
    (ADR 0054; a blocking SendMessage may be answered by a Message, §3.1.1)."""
    if record.reply is not None and record.state == T.COMPLETED:
        return {"message": reply_json(record)}
    return {"task": task_json(record, history_length, files)}


def listed_json(
    record: TaskRow, history_length: int | None, files: FileParts | None
) -> dict[str, Any]:
    """A task as ListTasks lists it: no file bytes, so a file a run sent by its bytes
    (ADR 0054) is described (``omitted: listing``), as a result file is; GetTask sends it."""
    task = task_json(record, history_length, files)
    for artifact in task.get("artifacts", ()):
        artifact["parts"] = [_described(part) for part in artifact["parts"]]
    return task


def _described(part: dict[str, Any]) -> dict[str, Any]:
    if "raw" not in part:
        return part
    size = raw_size(part["raw"])
    named = {k: part[k] for k in ("filename", "mediaType") if k in part}
    return {"data": {"omitted": "listing", **named, "size": size}}
