"""A2A's JSON-RPC on ``POST /`` as ``/openapi.json`` describes it: one request shape per
method, told apart by ``method`` (a ``oneOf`` of them), and the response envelope.

One path holds every method, so the document cannot give each its own operation (ADR 0056):
the request body is the ``oneOf``, and the links of ``POST /`` (``adapters.http.routes``)
chain a SendMessage to the methods that read, cancel or follow the task it made. The shapes
are what the handlers check (``adapters.http.a2a``): 1.0's SendMessage params are the Struct
it decodes (``SendMessageIn``); 0.3's, which it converts first, are described loosely.
"""

from __future__ import annotations

from typing import Any

from adapters.http.a2a.wire import STATE
from adapters.http.inbound import PushConfigIn, SendMessageIn
from adapters.http.openapi_parts import ref

ID = {"type": "string", "minLength": 1, "maxLength": 200}
HISTORY = {"type": "integer", "minimum": 0}
STATES = ["TASK_STATE_UNSPECIFIED", *STATE.values()]


def _params(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": properties}


TASK = _params(("id",), id=ID, historyLength=HISTORY)
TASK_ID = _params(("taskId",), taskId=ID)
CONFIG = _params(("taskId", "id"), taskId=ID, id=ID)
MESSAGE_03 = _params(("message",), message={"type": "object"}, configuration={"type": "object"})
LIST = _params(
    (),
    contextId=ID,
    status={"type": "string", "enum": STATES},
    pageSize={"type": "integer", "minimum": 1, "maximum": 100},
    pageToken={"type": "string"},
    historyLength=HISTORY,
    statusTimestampAfter={"type": "string", "format": "date-time"},
    includeArtifacts={"type": "boolean"},
)
# The 1.0 config methods: CreateTaskPushNotificationConfig's params are the config and its task.
CREATE_CONFIG = {"allOf": [ref(PushConfigIn), TASK_ID]}

METHODS: dict[str, dict[str, Any]] = {
    "SendMessage": ref(SendMessageIn),
    "SendStreamingMessage": ref(SendMessageIn),
    "GetTask": TASK,
    "CancelTask": TASK,
    "SubscribeToTask": TASK,
    "ListTasks": LIST,
    "GetExtendedAgentCard": _params(),
    "CreateTaskPushNotificationConfig": CREATE_CONFIG,
    "GetTaskPushNotificationConfig": CONFIG,
    "ListTaskPushNotificationConfigs": TASK_ID,
    "DeleteTaskPushNotificationConfig": CONFIG,
    "message/send": MESSAGE_03,
    "message/stream": MESSAGE_03,
    "tasks/get": TASK,
    "tasks/cancel": TASK,
    "tasks/resubscribe": TASK,
    "tasks/pushNotificationConfig/set": _params(
        ("taskId", "pushNotificationConfig"), taskId=ID, pushNotificationConfig={"type": "object"}
    ),
    "tasks/pushNotificationConfig/get": _params(
        ("id",), id=ID, pushNotificationConfigId={"type": "string"}
    ),
    "tasks/pushNotificationConfig/list": _params(("id",), id=ID),
    "tasks/pushNotificationConfig/delete": _params(
        ("id", "pushNotificationConfigId"), id=ID, pushNotificationConfigId=ID
    ),
}
STRUCTS = (SendMessageIn, PushConfigIn)  # what ``METHODS`` refers to, for the components

REQUEST_ID = {"type": ["string", "integer", "null"]}


def _request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "title": method,
        "type": "object",
        "required": ["jsonrpc", "method", "id", "params"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": REQUEST_ID,
            "method": {"const": method},
            "params": params,
        },
    }


REQUEST = {"oneOf": [_request(method, params) for method, params in METHODS.items()]}
RESPONSE = {
    "type": "object",
    "description": "a JSON-RPC response: a result, or an error (always HTTP 200)",
    "required": ["jsonrpc", "id"],
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": REQUEST_ID,
        "result": {},
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
        },
    },
    "oneOf": [{"required": ["result"]}, {"required": ["error"]}],
}
