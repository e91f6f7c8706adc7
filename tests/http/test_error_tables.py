"""The texts the error tables answer, pinned: the A2A refusals of where a message goes, the
last ``TaskMoved``, a failed dispatch, and ``/v1``'s and the console's own wording."""

from __future__ import annotations

from typing import Any

import falcon

from adapters.http import errors
from adapters.services.dispatch import DispatchFailed
from adapters.settings.config import LEASE_BUSY_TEXT
from engine.domain import errors as d
from engine.errors import InvalidArgument, StorageFull
from projections.console_queries import QueryError
from tests.http.conftest import MakeClient
from tests.http.test_a2a_contract import ECHO, send


def test_a2a_refusals_of_where_a_message_goes_keep_their_texts(make_client: MakeClient) -> None:
    client, _ = make_client(ECHO)
    task = send(client, "hello", "m1")["result"]["task"]
    task_id, context = task["id"], task["contextId"]

    def error(message_id: str, **extra: Any) -> dict[str, Any]:
        return dict(send(client, "again", message_id, **extra)["error"])

    assert error("m2", contextId="ctx-nope") == {
        "code": -32602,
        "message": "unknown contextId ctx-nope",
    }
    assert error("m3", contextId=context, taskId="task-nope") == {
        "code": -32001,
        "message": "Task task-nope not found in this context",
    }
    assert error("m4", taskId=task_id) == {
        "code": -32004,
        "message": f"Task {task_id} is in terminal state",
    }


def rpc(error: Exception, step: str | None = None) -> dict[str, Any] | None:
    answer = errors.rpc_error(error, step)
    return None if answer is None else answer.to_dict()


def test_rpc_table_rows_by_step() -> None:
    moved = d.TaskMoved("moved", task_id="t1")
    assert rpc(moved, errors.MESSAGE) == {
        "code": -32603,
        "message": "the task kept changing under this message; send it again",
    }
    assert rpc(moved) is None  # anywhere else: the HTTP surface's
    assert rpc(DispatchFailed("no runner"), errors.LAUNCH) == {
        "code": -32603,
        "message": "Dispatch failed on the remote: no runner",
    }
    assert rpc(InvalidArgument("no agent x"), errors.AGENT) == {
        "code": -32602,
        "message": "no agent x",
    }
    assert rpc(InvalidArgument("bad"), errors.LAUNCH) == {"code": -32004, "message": "bad"}
    assert rpc(d.Conflict("ended"), errors.CANCEL) == {"code": -32002, "message": "ended"}
    full = StorageFull("the disk is full")
    for step in (None, errors.LAUNCH, errors.CANCEL):
        assert rpc(full, step) == {
            "code": -32603,
            "message": full.message,
            "data": {"code": full.code},
        }
        assert rpc(d.LeaseBusy("held"), step) == {"code": -32603, "message": LEASE_BUSY_TEXT}


def test_v1_and_console_rows() -> None:
    busy = errors.V1_ERRORS[d.LeaseBusy](d.LeaseBusy("held"))
    assert (busy.status, busy.code, busy.message, busy.fields) == (
        falcon.HTTP_503,
        "lease_busy",
        LEASE_BUSY_TEXT,
        {},
    )
    failed = errors.V1_ERRORS[DispatchFailed](DispatchFailed("no runner"))
    assert (failed.status, failed.code, failed.message) == (
        falcon.HTTP_500,
        "dispatch_failed",
        "no runner",
    )
    query = errors.CONSOLE_ERRORS[QueryError](QueryError("bad cursor"))
    assert (query.status, query.code, query.message) == (
        falcon.HTTP_400,
        "invalid_argument",
        "bad cursor",
    )
