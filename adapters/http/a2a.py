"""A2A v1.0 JSON-RPC on ``POST /`` and the agent card (SPEC §5.2).

The wire follows what the official ``a2a-sdk`` client insists on
(``reference/a2a-agentcore-wire.md``): camelCase ProtoJSON, ``TASK_STATE_*`` and ``ROLE_*``
enum names, SendMessage wrapped as ``{"task": ...}``, GetTask and CancelTask bare, one whole
JSON-RPC envelope per SSE ``data:`` line with the Task first, errors as JSON-RPC objects in
HTTP 200. The official client gives up after 5 s of silence, so streams send a comment and
blocking sends a space at least every ``a2a_keepalive_s`` (2 s).

A task's work runs through the runner as a job of the task's session (its context): the job's
end completes or fails the task in the same transaction (``engine.domain.rules``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import falcon
import msgspec

from adapters.config import LEASE_BUSY_TEXT
from adapters.dispatch import DispatchFailed, new_id
from adapters.http import inbound, media, sse
from adapters.http.follow import follow
from adapters.http.inbound import SEND_MESSAGE_TEXTS, SendMessageIn, refusal
from adapters.runtime import Runtime
from engine.domain import commands as c
from engine.domain import ids
from engine.domain.errors import LeaseBusy
from engine.domain.task import TERMINAL as TASK_TERMINAL
from engine.domain.task import TaskState as T
from engine.errors import EngineError, InvalidArgument
from engine.log import Transaction
from projections import queries
from projections.view import SqlDomainView

MAX_BODY = 16 << 20
INTERRUPTED = frozenset({T.INPUT_REQUIRED, T.AUTH_REQUIRED})
# The A2A wire name of each task state: TASK_STATE_ and the state's own name.
STATE: dict[str, str] = {state: f"TASK_STATE_{state.name}" for state in T}
STATE_BY_NAME = {name: state for state, name in STATE.items()}

PARSE, INVALID_REQUEST, NO_METHOD, INVALID_PARAMS, INTERNAL = -32700, -32600, -32601, -32602, -32603
TASK_NOT_FOUND, NOT_CANCELABLE, PUSH_UNSUPPORTED, UNSUPPORTED = -32001, -32002, -32003, -32004
VERSION_UNSUPPORTED = -32009


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class _Duplicate(Exception):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id


def agent_card(base_url: str) -> dict[str, Any]:
    description = "foldline: runs each message through the configured agent command"
    return {
        "name": "foldline",
        "description": description,
        "supportedInterfaces": [
            {"url": base_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "version": "0.1.0",
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "run", "name": "run", "description": description, "tags": ["agent"]}],
    }


class AgentCard:
    """Served without the lease: a plain description of this endpoint."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = agent_card(self.runtime.config.public_url or f"{req.prefix}/")


# -- wire shapes -------------------------------------------------------------------------------


def _message(message_id: str, role: str, text: str, task_id: str, context: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "contextId": context,
        "taskId": task_id,
        "role": role,
        "parts": [{"text": text}],
    }


def task_json(record: queries.TaskRecord, history_length: int | None = None) -> dict[str, Any]:
    task_id, context, state = record.task_id, record.session_id, record.state
    status_text, result, updated = record.status_text, record.result, record.updated_at
    message_id, text = record.message_id, record.text
    status: dict[str, Any] = {"state": STATE[state], "timestamp": updated}
    # A completed task's status message is its result, or what it warned of (mmo's
    # "completed with warnings"); the result is always the artifact.
    reply = (status_text or result) if state == T.COMPLETED else status_text
    if reply:
        status["message"] = _message(f"{task_id}-status", "ROLE_AGENT", reply, task_id, context)
    task: dict[str, Any] = {"id": task_id, "contextId": context, "status": status}
    if state == T.COMPLETED:
        task["artifacts"] = [
            {"artifactId": f"{task_id}-result", "name": "result", "parts": [{"text": result or ""}]}
        ]
    history = [_message(message_id or f"{task_id}-in", "ROLE_USER", text, task_id, context)]
    if history_length is not None:
        history = history[len(history) - history_length :] if history_length else []
    if history:
        task["history"] = history
    return task


def _prompt(parts: list[inbound.PartIn]) -> str:
    texts = []
    for part in parts:
        if isinstance(part.text, str):
            texts.append(part.text)
        elif part.data is not msgspec.UNSET:
            # The prompt text, not an HTTP body: kept as the stdlib writes it, as before.
            texts.append(json.dumps(part.data))
        elif isinstance(part.raw, str):
            try:
                texts.append(base64.b64decode(part.raw).decode())
            except ValueError:
                raise RpcError(INVALID_PARAMS, "raw parts must be base64 UTF-8 text") from None
        else:
            raise RpcError(INVALID_PARAMS, "only text, data and raw text parts are supported")
    return "\n".join(texts)


def _optional_id(params: dict[str, Any], name: str, where: str) -> str | None:
    value = params.get(name)
    if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 200):
        raise RpcError(INVALID_PARAMS, f"{where}{name} must be a string of 1 to 200 characters")
    return value


def _history_length(params: dict[str, Any]) -> int | None:
    value = params.get("historyLength")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RpcError(INVALID_PARAMS, "historyLength must be an integer >= 0")
    return value


# -- the endpoint ------------------------------------------------------------------------------


class JsonRpc:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.methods = {
            "SendMessage": self.send_message,
            "SendStreamingMessage": self.send_streaming_message,
            "GetTask": self.get_task,
            "CancelTask": self.cancel_task,
            "ListTasks": self.list_tasks,
            "SubscribeToTask": self.subscribe,
        }
        self.unsupported = {
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig",
        }

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        request_id: Any = None
        try:
            raw = req.stream.read(MAX_BODY + 1)
            if len(raw) > MAX_BODY:
                raise RpcError(INVALID_REQUEST, f"request exceeds {MAX_BODY} bytes")
            try:
                body = media.decode_any(raw)
            except msgspec.DecodeError:
                raise RpcError(PARSE, "Parse error") from None
            if isinstance(body, list):
                raise RpcError(INVALID_REQUEST, "batch requests are not supported")
            if not isinstance(body, dict):
                raise RpcError(INVALID_REQUEST, "the request must be a JSON-RPC object")
            request_id = body.get("id")
            if not isinstance(request_id, (str, int, type(None))) or isinstance(request_id, bool):
                request_id = None
                raise RpcError(INVALID_REQUEST, "id must be a string, a number or null")
            method = body.get("method")
            if body.get("jsonrpc") != "2.0" or not isinstance(method, str):
                raise RpcError(INVALID_REQUEST, "jsonrpc must be '2.0' and method a string")
            version = req.get_header("A2A-Version")
            if version and version.split(".")[0] != "1":
                raise RpcError(VERSION_UNSUPPORTED, f"A2A version {version!r} is not supported")
            if method in self.unsupported:
                raise RpcError(PUSH_UNSUPPORTED, "push notifications are not supported")
            handler = self.methods.get(method)
            if handler is None:
                raise RpcError(NO_METHOD, "Method not found")
            params = body.get("params", {})
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            handler(params, request_id, resp)
        except RpcError as ex:
            resp.content_type = falcon.MEDIA_JSON
            resp.media = {
                "jsonrpc": "2.0",
                "id": request_id,
                "error": {"code": ex.code, "message": ex.message},
            }

    @staticmethod
    def _result(resp: falcon.Response, request_id: Any, result: Any) -> None:
        resp.media = {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _task_row(self, task_id: str) -> queries.TaskRecord:
        record = queries.task(self.runtime.engine.log.connection(), task_id)
        if record is None:
            raise RpcError(TASK_NOT_FOUND, f"Task {task_id} not found")
        return record

    def _task_id(self, params: dict[str, Any]) -> str:
        task_id = params.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise RpcError(INVALID_PARAMS, "id must be a non-empty string")
        return task_id

    def _wake(self) -> None:
        """A read that starts the lease acquisition exactly as an AgentCore ``get`` does: after
        a kill, a caller that only polls (or lists, or subscribes) is what wakes the takeover
        and its recovery (SPEC §8). The answer is read from the log either way."""
        with contextlib.suppress(LeaseBusy):
            self.runtime.ensure_lease()

    def _write(self) -> None:
        try:
            self.runtime.ensure_lease()
        except LeaseBusy:
            raise RpcError(INTERNAL, LEASE_BUSY_TEXT) from None

    # -- SendMessage / SendStreamingMessage ------------------------------------------------------

    @staticmethod
    def _send_params(params: dict[str, Any]) -> SendMessageIn:
        try:
            return msgspec.convert(params, SendMessageIn)
        except msgspec.ValidationError as ex:
            raise RpcError(INVALID_PARAMS, refusal(ex, SEND_MESSAGE_TEXTS)) from None

    def _accept(self, send: SendMessageIn) -> str:
        """Record the message's work (new task, or a follow-up of an interrupted one) and start
        it; a known messageId answers its task again. Returns the task id."""
        message = send.message
        message_id, context_id, task_id = message.message_id, message.context_id, message.task_id
        text = _prompt(message.parts)
        self._write()
        runtime, engine = self.runtime, self.runtime.engine
        command_id = ids.a2a_command(message_id)
        session_id = context_id or new_id("a2a")
        chosen: dict[str, str] = {}
        agent = message.agent
        try:
            policy = engine.settings.agent(agent)
        except InvalidArgument as ex:
            raise RpcError(INVALID_PARAMS, ex.message) from None

        def record(tx: Transaction, job_ids: list[str]) -> None:
            job_id = job_ids[0]
            if tx.known_command(command_id) is not None:
                raise _Duplicate(str(queries.task_of_command(tx.cursor, command_id)))
            view = SqlDomainView(tx.cursor)
            session = view.session(session_id)
            if context_id is not None and session is None:
                raise RpcError(INVALID_PARAMS, f"unknown contextId {context_id}")
            if session is None:
                engine.handle_in(
                    tx,
                    c.CreateSession(
                        session_id=session_id, origin="a2a", start_run_id=new_id("run")
                    ),
                )
            target = task_id
            if (
                target is None
                and session is not None
                and session.owes is not None
                and (session.owes.kind == "a2a")
            ):
                target = session.owes.ref
            if target is not None:
                task = view.task(target)
                if task is None or task.session_id != session_id:
                    raise RpcError(TASK_NOT_FOUND, f"Task {target} not found in this context")
                if task.state in TASK_TERMINAL:
                    raise RpcError(UNSUPPORTED, f"Task {target} is in terminal state")
                if any(j.task_id == target for j in view.live_jobs(session_id)):
                    raise RpcError(UNSUPPORTED, f"Task {target} is still working")
            else:
                target = new_id("task")
                engine.handle_in(
                    tx,
                    c.CreateTask(
                        task_id=target, session_id=session_id, message_id=message_id, text=text
                    ),
                )
            engine.handle_in(
                tx,
                c.AcceptJob(
                    job_id=job_id,
                    session_id=session_id,
                    prompt=text,
                    agent=agent,
                    resource_group=policy.resource_group,
                    units=policy.units,
                    task_id=target,
                    owed=False,
                    command_id=command_id,
                ),
            )
            chosen["task_id"] = target

        try:
            runtime.jobs.launch(session_id, text.encode(), agent, record)
        except _Duplicate as duplicate:
            return duplicate.task_id
        except DispatchFailed as ex:
            raise RpcError(INTERNAL, f"Dispatch failed on the remote: {ex}") from None
        except LeaseBusy:
            raise RpcError(INTERNAL, LEASE_BUSY_TEXT) from None
        except EngineError as ex:
            raise RpcError(UNSUPPORTED, ex.message) from None
        return chosen["task_id"]

    def send_message(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        send = self._send_params(params)
        config = send.configuration or inbound.ConfigurationIn()
        history = config.history_length
        task_id = self._accept(send)
        if config.return_immediately:
            self._result(resp, request_id, {"task": task_json(self._task_row(task_id), history)})
            return
        resp.content_type = falcon.MEDIA_JSON
        resp.stream = self._blocking(task_id, request_id, history)

    def _blocking(self, task_id: str, request_id: Any, history: int | None) -> Iterator[bytes]:
        """Headers at once, then a space every keep-alive interval (leading whitespace is
        valid JSON and resets the client's read timeout), then the answer."""
        deadline = time.monotonic() + self.runtime.config.sync_wait_s
        for row in self._watch(task_id, deadline):
            if row is None:
                yield b" "
                continue
            if row.state in TASK_TERMINAL or row.state in INTERRUPTED:
                break
        row = self._task_row(task_id)
        yield media.encode(
            {"jsonrpc": "2.0", "id": request_id, "result": {"task": task_json(row, history)}}
        )

    def _watch(self, task_id: str, deadline: float) -> Iterator[queries.TaskRecord | None]:
        """Yields the task row each time it changes, and None when a keep-alive is due."""
        log = self.runtime.engine.log
        interval = self.runtime.config.a2a_keepalive_s
        last_version = -1
        for recorded in follow(
            log,
            0,
            self.runtime.shutdown,
            keepalive_s=interval,
            poll_s=0.25,
            deadline=deadline,
            stream_id=ids.task(task_id),
        ):
            if recorded is None:
                yield None
                continue
            # One read per change: the row already holds every event of the batch.
            record = queries.task(log.connection(), task_id)
            if record is not None and record.version != last_version:
                last_version = record.version
                yield record

    def send_streaming_message(
        self, params: dict[str, Any], request_id: Any, resp: falcon.Response
    ) -> None:
        task_id = self._accept(self._send_params(params))
        self._stream(resp, task_id, request_id)

    def _stream(self, resp: falcon.Response, task_id: str, request_id: Any) -> None:
        resp.content_type = "text/event-stream"
        resp.set_header("Cache-Control", "no-store")
        resp.stream = self._events(task_id, request_id)

    def _events(self, task_id: str, request_id: Any) -> Iterator[bytes]:
        def frame(result: dict[str, Any]) -> bytes:
            return sse.data({"jsonrpc": "2.0", "id": request_id, "result": result})

        deadline = time.monotonic() + self.runtime.config.sync_wait_s
        first = True
        for row in self._watch(task_id, deadline):
            if row is None:
                yield b": keep-alive\n\n"
                continue
            task = task_json(row)
            if first:  # the Task comes first, as the client insists
                first = False
                yield frame({"task": task})
            else:
                if row.state == T.COMPLETED:
                    yield frame(
                        {
                            "artifactUpdate": {
                                "taskId": task_id,
                                "contextId": row.session_id,
                                "artifact": task["artifacts"][0],
                                "lastChunk": True,
                            }
                        }
                    )
                yield frame(
                    {
                        "statusUpdate": {
                            "taskId": task_id,
                            "contextId": row.session_id,
                            "status": task["status"],
                        }
                    }
                )
            if row.state in TASK_TERMINAL or row.state in INTERRUPTED:
                return
        if self.runtime.shutdown.is_set():
            yield sse.SHUTDOWN

    # -- GetTask / CancelTask / ListTasks / SubscribeToTask --------------------------------------

    def get_task(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        task_id = self._task_id(params)
        self._wake()
        row = self._task_row(task_id)
        self._result(resp, request_id, task_json(row, _history_length(params)))

    def cancel_task(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        task_id = self._task_id(params)
        row = self._task_row(task_id)
        if row.state != T.CANCELED:
            if row.state in TASK_TERMINAL:
                raise RpcError(NOT_CANCELABLE, f"task {task_id} is already {row.state}")
            self._write()
            try:
                self.runtime.engine.handle(
                    c.CancelTask(task_id=task_id, text="Canceled by the caller.")
                )
            except EngineError as ex:
                raise RpcError(NOT_CANCELABLE, ex.message) from None
        self._result(resp, request_id, task_json(self._task_row(task_id)))

    def list_tasks(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        size = params.get("pageSize", 50)
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 100:
            raise RpcError(INVALID_PARAMS, "pageSize must be an integer from 1 to 100")
        context = _optional_id(params, "contextId", "")
        status = params.get("status")
        state = None
        if status not in (None, "TASK_STATE_UNSPECIFIED"):
            if status not in STATE_BY_NAME:
                raise RpcError(INVALID_PARAMS, f"unknown status {status!r}")
            state = STATE_BY_NAME[status]
        self._wake()
        conn = self.runtime.engine.log.connection()
        total = queries.count_tasks(conn, context, state)
        token = params.get("pageToken")
        before = None
        if token:  # keyset: the last (created_at, task_id) of the previous page
            try:
                created, last_id = media.decode(
                    base64.urlsafe_b64decode(token.encode()), tuple[str, str]
                )
            except (ValueError, TypeError, AttributeError):
                raise RpcError(INVALID_PARAMS, "pageToken is not one this server issued") from None
            before = (created, last_id)
        rows = queries.tasks_newest_first(conn, context, state, before, size + 1)
        more = len(rows) > size
        rows = rows[:size]
        next_token = ""
        if more:
            next_token = base64.urlsafe_b64encode(
                media.encode([rows[-1].created_at, rows[-1].task_id])
            ).decode()
        history = _history_length(params)
        self._result(
            resp,
            request_id,
            {
                "tasks": [task_json(row, history) for row in rows],
                "nextPageToken": next_token,
                "pageSize": size,
                "totalSize": total,
            },
        )

    def subscribe(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        task_id = self._task_id(params)
        self._wake()
        row = self._task_row(task_id)
        if row.state in TASK_TERMINAL:
            raise RpcError(UNSUPPORTED, f"Task {task_id} is in terminal state: {STATE[row.state]}")
        self._stream(resp, task_id, request_id)
