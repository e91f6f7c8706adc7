"""The event stream of one A2A task (``SendStreamingMessage``, ``SubscribeToTask``): live
progress as the official ``a2a-sdk`` client reads it.

First the Task as it stands (the client insists on it) and, while it works, a
``TaskStatusUpdateEvent`` saying so (the official server's order), then what the task's current
run has printed so far, then, live from the log: each output chunk of the run as a
``TaskArtifactUpdateEvent`` of the task's one artifact (the first chunk of a run replaces what
the client holds, ``append: false``; the next ones ``append: true``), each task change as a
``TaskStatusUpdateEvent``, and at completion the whole result (its files too) with ``lastChunk:
true``. A client that reconnects (``SubscribeToTask``) gets the same from the task's state, so
nothing of the artifact is lost. A chunk of an artifact the run made itself (ADR 0054) goes out
as the run said it, with its own ``append`` and ``lastChunk``. A follow-up that starts a new run
for the task (ADR 0024)
simply restarts the artifact; one delivered into the running run (ADR 0038) starts none, so the
artifact goes on. A message's stream ends at a terminal or interrupted state, a subscription's
at a terminal one only (it sees the task through its questions), or when the client leaves, or
when the server stops or its log is gone (``stop``); never at a cap, whatever
``FOLDLINE_SYNC_WAIT_S`` says: a stream ended early would look to the client like a task that
never finished.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from adapters.http import sse
from adapters.http.a2a.wire import (
    FileParts,
    artifact_update,
    chunk_update,
    data_parts,
    has_result,
    status_update,
    task_json,
)
from adapters.http.follow import follow
from adapters.http.ports import EventFeed, TaskReads
from engine.domain import ids
from engine.domain.answer import Artifact
from engine.domain.job import JobAccepted, JobOutput
from engine.domain.push import TaskPushConfigDeleted, TaskPushConfigSet
from engine.domain.task import TERMINAL, TaskArtifactUpdated
from engine.domain.task import TaskState as T
from engine.events import RecordedEvent

# The states after which a message's stream ends: the task will not change without a new
# message. A subscription (§3.1.6) goes on through them, to a terminal state.
ENDS = TERMINAL | {T.INPUT_REQUIRED, T.AUTH_REQUIRED}
KEEPALIVE = b": keep-alive\n\n"
# A push config changes nothing a subscriber sees (ADR 0039): no status update for it.
CONFIG_EVENTS = (TaskPushConfigSet, TaskPushConfigDeleted)


def task_events(
    reads: TaskReads,
    events: EventFeed,
    task_id: str,
    request_id: Any,
    stop: Callable[[], bool],
    *,
    keepalive_s: float,
    files: FileParts | None = None,
    ends: frozenset[str] = ENDS,
) -> Iterator[bytes]:
    """The SSE frames of the task's stream, until a status in ``ends`` or ``stop()``."""

    def frame(result: dict[str, Any]) -> bytes:
        return sse.data({"jsonrpc": "2.0", "id": request_id, "result": result})

    after = events.head()  # everything after this comes live; the row read next is at least here
    record = reads.task(task_id)
    if record is None:
        return
    yield frame({"task": task_json(record, files=files)})
    if record.state in ends:
        return
    if record.state == T.WORKING:
        yield frame(status_update(record))
    context, task_stream, version = record.session_id, ids.task(task_id), record.version
    jobs = reads.task_jobs(task_id)
    current = ids.job(jobs[-1]) if jobs else None  # the run whose output is the artifact
    chunked = False  # whether the client holds a chunk of the current run

    def chunk(text: str) -> bytes:
        nonlocal chunked
        update = artifact_update(task_id, context, text, append=chunked, last_chunk=False)
        chunked = True
        return frame(update)

    if current is not None:  # what the current run printed before this stream began
        for past in events.read_stream(current):
            if past.position > after:
                break
            if isinstance(past.event, JobOutput):
                yield chunk(past.event.text)

    def wanted(recorded: RecordedEvent) -> bool:
        event = recorded.event
        return (
            (recorded.stream_id == task_stream and not isinstance(event, CONFIG_EVENTS))
            or (isinstance(event, JobAccepted) and event.task == task_id)
            or (recorded.stream_id == current and isinstance(event, JobOutput))
        )

    for recorded in follow(
        events, after, stop, keepalive_s=keepalive_s, poll_s=0.25, wanted=wanted
    ):
        if recorded is None:
            yield KEEPALIVE
        elif isinstance(recorded.event, JobAccepted):
            current, chunked = recorded.stream_id, False  # a new run: its output starts over
        elif isinstance(recorded.event, JobOutput):
            yield chunk(recorded.event.text)
        elif isinstance(recorded.event, TaskArtifactUpdated):  # a run's own chunk (ADR 0054)
            made = recorded.event
            artifact = Artifact(
                artifact_id=made.artifact_id,
                name=made.name,
                description=made.description,
                parts=made.parts,
            )
            yield frame(
                chunk_update(
                    task_id, context, artifact, append=made.append, last_chunk=made.last_chunk
                )
            )
        elif recorded.version > version:
            record = reads.task(task_id)
            if record is None:
                return
            version = record.version  # one read covers every task event up to it
            if has_result(record):
                parts = files(record) if files is not None and record.files else []
                yield frame(
                    artifact_update(
                        task_id,
                        context,
                        record.result or "",
                        append=False,
                        last_chunk=True,
                        files=data_parts(record) + parts,
                    )
                )
            yield frame(status_update(record))
            if record.state in ends:
                return
    yield sse.SHUTDOWN  # with no deadline, follow ends only once stop() says so
