"""A2A v1.0 JSON-RPC on ``POST /`` and the agent card (design.md §5.2).

The wire follows what the official ``a2a-sdk`` client insists on
(design.md §13.4): camelCase ProtoJSON, ``TASK_STATE_*`` and ``ROLE_*``
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
import time
from collections.abc import Iterator
from typing import Any

import falcon
import msgspec

from adapters.http import inbound, media
from adapters.http.a2a import accept, card, parts, push, result_files, stream, v03
from adapters.http.a2a.wire import STATE, STATE_BY_NAME, listed_json, send_result, task_json
from adapters.http.errors import (
    CANCEL,
    INVALID_PARAMS,
    INVALID_REQUEST,
    NO_METHOD,
    NOT_CANCELABLE,
    PARSE,
    TASK_NOT_FOUND,
    UNSUPPORTED,
    VERSION_UNSUPPORTED,
    RpcError,
    as_rpc,
    rpc_error,
)
from adapters.http.follow import follow
from adapters.http.inbound import SEND_MESSAGE_TEXTS, SendMessageIn, refusal
from adapters.http.ports import ServerRuntime
from adapters.system.url_policy import UrlPolicy
from engine.clock import format_time, parse_time
from engine.domain import commands as c
from engine.domain import ids
from engine.domain.errors import LeaseBusy
from engine.domain.rows import TaskRow
from engine.domain.task import TERMINAL as TASK_TERMINAL
from engine.domain.task import TaskState as T
from engine.errors import EngineError

MAX_BODY = 16 << 20
INTERRUPTED = frozenset({T.INPUT_REQUIRED, T.AUTH_REQUIRED})


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


def _timestamp(params: dict[str, Any], name: str) -> str | None:
    """An RFC 3339 time parameter, in the log's own time form (None when absent).

    Raises:
        RpcError: -32602, not an RFC 3339 time.
    """
    value = params.get(name)
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return format_time(parse_time(value))
    except ValueError:
        raise RpcError(INVALID_PARAMS, f"{name} must be an RFC 3339 time") from None


def _envelope(req: falcon.Request) -> dict[str, Any]:
    """The request's body, a JSON-RPC object of at most ``MAX_BODY`` bytes.

    Raises:
        RpcError: larger, not JSON, a batch, or not an object.
    """
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
    return body


def _request_id(body: dict[str, Any]) -> str | int | None:
    """The envelope's ``id``.

    Raises:
        RpcError: neither a string, a number nor null (the answer's id is then null).
    """
    request_id = body.get("id")
    if not isinstance(request_id, (str, int, type(None))) or isinstance(request_id, bool):
        raise RpcError(INVALID_REQUEST, "id must be a string, a number or null")
    return request_id


# -- the endpoint ------------------------------------------------------------------------------


class JsonRpc:
    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime
        self.methods = {
            "SendMessage": self.send_message,
            "SendStreamingMessage": self.send_streaming_message,
            "GetTask": self.get_task,
            "CancelTask": self.cancel_task,
            "ListTasks": self.list_tasks,
            "SubscribeToTask": self.subscribe,
            "GetExtendedAgentCard": self.get_extended_card,
        }
        self.push = push.PushMethods(runtime, self._write)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        request_id: Any = None
        in_03 = False  # a 0.3 method was asked for: its errors are in that dialect
        try:
            body = _envelope(req)
            request_id = _request_id(body)
            method = body.get("method")
            if body.get("jsonrpc") != "2.0" or not isinstance(method, str):
                raise RpcError(INVALID_REQUEST, "jsonrpc must be '2.0' and method a string")
            version = req.get_header("A2A-Version")
            if version and not v03.is_supported_version(version):
                raise RpcError(VERSION_UNSUPPORTED, f"A2A version {version!r} is not supported")
            # The two sets of names do not collide: the method says which shapes to speak.
            legacy = v03.METHODS.get(method)
            in_03 = legacy is not None or method in v03.PUSH_METHODS
            handler = self.methods.get(legacy or method)
            pushes = method in push.METHODS or method in v03.PUSH_METHODS
            if handler is None and not pushes:
                raise RpcError(NO_METHOD, "Method not found")
            params = body.get("params", {})
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            if pushes:
                self._result(resp, request_id, self.push.answer(method, params))
                return
            assert handler is not None
            if legacy is not None:
                params = v03.params_in(legacy, params)
            resp.context.request = req  # for what a method reads of it (its origin, its token)
            handler(params, request_id, resp)
            if legacy is not None:
                v03.reshape(resp, legacy)
        except EngineError as ex:
            # The server's fault (a full disk, ...) or a busy workspace, not the request's: a
            # JSON-RPC error from the one table, and HTTP 200 still, or the client would lose
            # the code. Any other engine error is the HTTP surface's.
            answer = rpc_error(ex)
            if answer is None:
                raise
            self._error(resp, request_id, answer, in_03)
        except RpcError as ex:
            self._error(resp, request_id, ex, in_03)

    def hold_or_answer_busy(self, req: falcon.Request, resp: falcon.Response) -> bool:
        """In shared-volume mode (ADR 0042), before anything else: hold the lease, or answer
        the lease-busy error of every mode, -32603 with the fixed text in HTTP 200, its ``id``
        the request's when the body is a JSON-RPC object within the limit, else null. Nothing
        else of the request is checked first, as in the source system; the log stays closed.
        Returns whether the lease is held (else the answer is written)."""
        try:
            self.runtime.ensure_lease()
        except LeaseBusy as busy:
            answer = rpc_error(busy)  # the table's row for a busy workspace, anywhere
            if answer is None:
                raise
            request_id, method = None, None
            with contextlib.suppress(RpcError):
                body = _envelope(req)
                request_id, method = _request_id(body), body.get("method")
            in_03 = method in v03.METHODS or method in v03.PUSH_METHODS
            self._error(resp, request_id, answer, in_03)
            return False
        return True

    @staticmethod
    def _error(
        resp: falcon.Response, request_id: Any, error: RpcError, legacy: bool = False
    ) -> None:
        """Answer ``error``: in 1.0 with its ``ErrorInfo`` (§9.5), in 0.3 as that dialect has
        it (a method of neither, or a request too broken to name one, answers in 1.0)."""
        resp.content_type = falcon.MEDIA_JSON
        error_object = error.to_dict(legacy=legacy)
        resp.media = {"jsonrpc": "2.0", "id": request_id, "error": error_object}

    @staticmethod
    def _result(resp: falcon.Response, request_id: Any, result: Any) -> None:
        resp.media = {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _task_row(self, task_id: str) -> TaskRow:
        record = self.runtime.reads.task(task_id)
        if record is None:
            raise RpcError(TASK_NOT_FOUND, f"Task {task_id} not found", {"taskId": task_id})
        return record

    def _files(self, *, inline: bool = True) -> result_files.Parts:
        """The result's file parts in an answer (``result_files``): inline, or URLs on
        ``FOLDLINE_PUBLIC_URL`` where that reaches the file route."""
        return result_files.parts_for(self.runtime.config, inline=inline)

    def _task_id(self, params: dict[str, Any]) -> str:
        task_id = params.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise RpcError(INVALID_PARAMS, "id must be a non-empty string")
        return task_id

    def _wake(self) -> None:
        """A read that starts the lease acquisition exactly as an AgentCore ``get`` does: after
        a kill, a caller that only polls (or lists, or subscribes) is what wakes the takeover
        and its recovery (design.md §8). The answer is read from the log either way."""
        with contextlib.suppress(LeaseBusy):
            self.runtime.ensure_lease()

    def _wake_quietly(self) -> None:
        """``_wake`` inside an open stream: a storage fault must not cut it mid-frame (the
        stream ends on its own when the log is gone)."""
        with contextlib.suppress(EngineError, OSError):
            self._wake()

    def _write(self) -> None:
        self.runtime.ensure_lease()  # LeaseBusy: a JSON-RPC error from the one table

    # -- SendMessage / SendStreamingMessage ------------------------------------------------------

    @staticmethod
    def _send_params(params: dict[str, Any]) -> SendMessageIn:
        try:
            return msgspec.convert(params, SendMessageIn)
        except msgspec.ValidationError as ex:
            raise RpcError(INVALID_PARAMS, refusal(ex, SEND_MESSAGE_TEXTS)) from None

    def _accept(self, send: SendMessageIn) -> str:
        """Record the message's work and start it (``accept``). Returns the task id."""
        policy = UrlPolicy(self.runtime.config.push_allow)
        text, files = parts.read(send.message.parts, policy)  # before any lease or task
        config = send.configuration or inbound.ConfigurationIn()
        push_config = None
        if config.task_push_notification_config is not None:
            push_config = push.push_config(policy, config.task_push_notification_config)
        self._write()
        return accept.accept(self.runtime, send.message, text, files, push_config)

    def send_message(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        send = self._send_params(params)
        config = send.configuration or inbound.ConfigurationIn()
        history = config.history_length
        task_id = self._accept(send)
        if config.return_immediately:
            self._result(resp, request_id, {"task": task_json(self._task_row(task_id), history)})
            return
        resp.content_type = falcon.MEDIA_JSON
        resp.stream = self._blocking(task_id, request_id, history, self._files())

    def _blocking(
        self, task_id: str, request_id: Any, history: int | None, files: result_files.Parts
    ) -> Iterator[bytes]:
        """Headers at once, then a space every keep-alive interval (leading whitespace is
        valid JSON and resets the client's read timeout), then the answer. At the cap
        (``FOLDLINE_SYNC_WAIT_S``) the answer is the task as it stands, ``working`` most likely,
        never an error: the task goes on, and GetTask or SubscribeToTask follow it."""
        deadline = time.monotonic() + self.runtime.config.sync_wait_s
        for row in self._watch(task_id, deadline):
            if row is None:
                yield b" "
                continue
            if row.state in TASK_TERMINAL or row.state in INTERRUPTED:
                break
        answer = send_result(self._task_row(task_id), history, files)
        yield media.encode({"jsonrpc": "2.0", "id": request_id, "result": answer})

    def _watch(self, task_id: str, deadline: float) -> Iterator[TaskRow | None]:
        """Yields the task row each time it changes, and None when a keep-alive is due."""
        events, reads = self.runtime.events, self.runtime.reads
        interval = self.runtime.config.a2a_keepalive_s
        last_version = -1
        for recorded in follow(
            events,
            0,
            self.runtime.ending,
            keepalive_s=interval,
            poll_s=0.25,
            deadline=deadline,
            stream_id=ids.task(task_id),
        ):
            if recorded is None:
                yield None
                continue
            # One read per change: the row already holds every event of the batch.
            record = reads.task(task_id)
            if record is not None and record.version != last_version:
                last_version = record.version
                yield record

    def send_streaming_message(
        self, params: dict[str, Any], request_id: Any, resp: falcon.Response
    ) -> None:
        task_id = self._accept(self._send_params(params))
        self._stream(resp, task_id, request_id)

    def _stream(
        self,
        resp: falcon.Response,
        task_id: str,
        request_id: Any,
        ends: frozenset[str] = stream.ENDS,
    ) -> None:
        resp.content_type = "text/event-stream"
        resp.set_header("Cache-Control", "no-store")
        resp.stream = self._events(task_id, request_id, self._files(), ends)

    def _events(
        self, task_id: str, request_id: Any, files: result_files.Parts, ends: frozenset[str]
    ) -> Iterator[bytes]:
        runtime = self.runtime
        for frame in stream.task_events(
            runtime.reads,
            runtime.events,
            task_id,
            request_id,
            runtime.ending,
            keepalive_s=runtime.config.a2a_keepalive_s,
            files=files,
            ends=ends,
        ):  # no deadline: the sync cap is for blocking SendMessage only
            if frame is stream.KEEPALIVE:
                # After a kill, a subscriber may be the only caller: with no cap to end its
                # stream and make it ask again, the stream itself keeps waking the takeover
                # that finishes the task (design.md §8), as a poller's reads do. Free once held.
                self._wake_quietly()
            yield frame

    # -- GetTask / CancelTask / ListTasks / SubscribeToTask --------------------------------------

    def get_task(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        task_id = self._task_id(params)
        self._wake()
        row = self._task_row(task_id)
        self._result(resp, request_id, task_json(row, _history_length(params), self._files()))

    def cancel_task(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        task_id = self._task_id(params)
        row = self._task_row(task_id)
        if row.state != T.CANCELED:
            if row.state in TASK_TERMINAL:
                raise RpcError(NOT_CANCELABLE, f"task {task_id} is already {row.state}")
            self._write()
            try:
                self.runtime.handle(c.CancelTask(task_id=task_id, text="Canceled by the caller."))
            except EngineError as ex:  # not cancelable, or the server's fault: the one table
                raise as_rpc(ex, CANCEL) from None
        self._result(resp, request_id, task_json(self._task_row(task_id)))

    def list_tasks(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        """``ListTasks`` (§3.1.4): by last update, newest first, keyset-paged on
        (status timestamp, id); artifacts only with ``includeArtifacts``."""
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
        after = _timestamp(params, "statusTimestampAfter")
        artifacts = params.get("includeArtifacts", False)
        if not isinstance(artifacts, bool):
            raise RpcError(INVALID_PARAMS, "includeArtifacts must be true or false")
        self._wake()
        reads = self.runtime.reads
        total = reads.count_tasks(context, state, after)
        token = params.get("pageToken")
        before = None
        if token:  # keyset: the last (updated_at, task_id) of the previous page
            try:
                updated, last_id = media.decode(
                    base64.urlsafe_b64decode(token.encode()), tuple[str, str]
                )
            except (ValueError, TypeError, AttributeError):
                raise RpcError(INVALID_PARAMS, "pageToken is not one this server issued") from None
            before = (updated, last_id)
        rows = reads.tasks_last_updated_first(context, state, after, before, size + 1)
        more = len(rows) > size
        rows = rows[:size]
        next_token = ""
        if more:
            next_token = base64.urlsafe_b64encode(
                media.encode([rows[-1].updated_at, rows[-1].task_id])
            ).decode()
        history = _history_length(params)
        # No file bytes in a listing: URL parts or descriptions (GetTask sends bytes).
        tasks = [listed_json(row, history, self._files(inline=False)) for row in rows]
        if not artifacts:
            for task in tasks:
                task.pop("artifacts", None)
        listing = {"tasks": tasks, "nextPageToken": next_token, "pageSize": size}
        self._result(resp, request_id, {**listing, "totalSize": total})

    def subscribe(self, params: dict[str, Any], request_id: Any, resp: falcon.Response) -> None:
        task_id = self._task_id(params)
        self._wake()
        row = self._task_row(task_id)
        if row.state in TASK_TERMINAL:
            raise RpcError(
                UNSUPPORTED,
                f"Task {task_id} is in terminal state: {STATE[row.state]}",
                {"taskId": task_id, "state": STATE[row.state]},
            )
        # §3.1.6: a subscription ends when the task does, through any question it asks.
        self._stream(resp, task_id, request_id, ends=TASK_TERMINAL)

    def get_extended_card(
        self, params: dict[str, Any], request_id: Any, resp: falcon.Response
    ) -> None:
        extended = card.extended_card(self.runtime, resp.context.request)
        self._result(resp, request_id, extended)
