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
        """The error's code and message (its ErrorInfo is ``test_rpc_errors_carry_...``'s)."""
        answer = send(client, "again", message_id, **extra)["error"]
        return {"code": answer["code"], "message": answer["message"]}

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
    """The error object in the 0.3 dialect: code, message and the detail's metadata."""
    answer = errors.rpc_error(error, step)
    return None if answer is None else answer.to_dict(legacy=True)


def test_rpc_errors_carry_one_error_info_in_1_0() -> None:
    full = errors.rpc_error(StorageFull("the disk is full"))
    assert full is not None and full.to_dict() == {
        "code": -32603,
        "message": "the disk is full",
        "data": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "INTERNAL_ERROR",
                "domain": "a2a-protocol.org",
                "metadata": {"code": "storage_full"},
            }
        ],
    }
    # Every code the server answers has its reason: none is left without one.
    for code in (-32700, -32600, -32601, -32602, -32603, -32001, -32002, -32004, -32005):
        (info,) = errors.RpcError(code, "m").to_dict()["data"]
        assert info["domain"] == "a2a-protocol.org" and info["reason"], code


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
        assert rpc(d.LeaseBusy("held"), step) == {
            "code": -32603,
            "message": LEASE_BUSY_TEXT,
            "data": {"code": "lease_busy"},
        }


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
