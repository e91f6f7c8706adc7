"""A2A 0.3 on the same URL (design.md §5.2 "a plus"; design.md §13.4): the
0.3 method names, mapped onto the 1.0 handlers, and the 0.3 shapes, translated at the edge.

Inbound, ``params`` become their 1.0 form (``role: user``, parts by ``kind``, ``blocking``);
outbound, every result and stream event becomes its 0.3 form: ``kind`` discriminators, lowercase
states, ``user``/``agent`` roles, ``kind`` on parts, a bare Task from ``message/send``, and
``final`` on status updates (0.3 clients validate strictly, with pydantic). The 1.0 handlers stay
the one implementation; this module only renames and reshapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import falcon

from adapters.http import media, sse
from adapters.http.a2a.wire import STATE
from engine.domain.task import TERMINAL
from engine.domain.task import TaskState as T

# 0.3 method -> the 1.0 method that answers it.
METHODS = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}
PUSH_METHODS = frozenset(
    f"tasks/pushNotificationConfig/{verb}" for verb in ("set", "get", "list", "delete")
)
# 1.0 wire state -> 0.3 state (the task machine's own lowercase names are 0.3's).
STATES = {name: str(state) for state, name in STATE.items()}
FINAL = frozenset(STATE[s] for s in TERMINAL | {T.INPUT_REQUIRED, T.AUTH_REQUIRED})
TERMINAL_NAMES = frozenset(STATE[s] for s in TERMINAL)


def is_supported_version(version: str) -> bool:
    """``A2A-Version`` 1.x, or 0.3 (what the 0.3 transport sends); methods pick the shapes."""
    parts = version.strip().split(".")
    return parts[0] == "1" or parts[:2] == ["0", "3"]


# -- inbound -----------------------------------------------------------------------------------


def _part_in(part: Any) -> Any:
    if not isinstance(part, dict):
        return part  # refused by the 1.0 validation with its usual text
    kind = part.get("kind", "text" if "text" in part else None)
    if kind == "text":
        return {"text": part.get("text")}
    if kind == "data":
        return {"data": part.get("data")}
    file = part.get("file")
    if kind == "file" and isinstance(file, dict):
        content = {"raw": file["bytes"]} if "bytes" in file else {"url": file.get("uri")}
        named = {"filename": file.get("name"), "mediaType": file.get("mimeType")}
        return {**content, **{k: v for k, v in named.items() if v is not None}}
    return {"kind": kind}  # no content the server reads: -32005, as in 1.0


def push_config_in(config: dict[str, Any]) -> dict[str, Any]:
    """A 0.3 ``PushNotificationConfig`` as the 1.0 one (the first scheme), made in 0.3."""
    converted = {**config, "dialect": "0.3"}
    auth = config.get("authentication")
    if isinstance(auth, dict):
        schemes = auth.get("schemes")
        scheme = schemes[0] if isinstance(schemes, list) and schemes else ""
        credentials = auth.get("credentials")  # optional in 0.3
        converted["authentication"] = {
            "scheme": scheme,
            "credentials": "" if credentials is None else credentials,
        }
    return converted


def params_in(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """0.3 ``params`` in their 1.0 form (only SendMessage's differ)."""
    if method not in ("SendMessage", "SendStreamingMessage"):
        return params
    converted = dict(params)
    message = params.get("message")
    if isinstance(message, dict):
        roles = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
        role = message.get("role")
        converted["message"] = {
            **message,
            "role": roles.get(role, role) if isinstance(role, str) else role,
            "parts": [_part_in(p) for p in message.get("parts") or []] or message.get("parts"),
        }
    configuration = params.get("configuration")
    if isinstance(configuration, dict):
        converted["configuration"] = {
            "returnImmediately": configuration.get("blocking") is False,
            **(
                {"historyLength": configuration["historyLength"]}
                if "historyLength" in configuration
                else {}
            ),
        }
        push = configuration.get("pushNotificationConfig")
        if push is not None:
            converted["configuration"]["taskPushNotificationConfig"] = (
                push_config_in(push) if isinstance(push, dict) else push
            )
    return converted


# -- outbound ----------------------------------------------------------------------------------


def _part(part: dict[str, Any]) -> dict[str, Any]:
    if "text" in part:
        return {"kind": "text", "text": part["text"]}
    if "data" in part:
        return {"kind": "data", "data": part["data"]}
    file = {"bytes": part["raw"]} if "raw" in part else {"uri": part.get("url", "")}
    names = (("filename", "name"), ("mediaType", "mimeType"))  # 1.0's names, then 0.3's
    file.update({v03: part[v10] for v10, v03 in names if v10 in part})
    return {"kind": "file", "file": file}


def _message(message: dict[str, Any]) -> dict[str, Any]:
    role = "agent" if message.get("role") == "ROLE_AGENT" else "user"
    parts = [_part(p) for p in message.get("parts", [])]
    return {**message, "kind": "message", "role": role, "parts": parts}


def _status(status: dict[str, Any]) -> dict[str, Any]:
    out = {**status, "state": STATES.get(status["state"], "unknown")}
    if "message" in status:
        out["message"] = _message(status["message"])
    return out


def _artifact(artifact: dict[str, Any]) -> dict[str, Any]:
    return {**artifact, "parts": [_part(p) for p in artifact.get("parts", [])]}


def task(value: dict[str, Any]) -> dict[str, Any]:
    out = {**value, "kind": "task", "status": _status(value["status"])}
    if "history" in value:
        out["history"] = [_message(m) for m in value["history"]]
    if "artifacts" in value:
        out["artifacts"] = [_artifact(a) for a in value["artifacts"]]
    return out


def event(result: dict[str, Any], final_states: frozenset[str] = FINAL) -> dict[str, Any]:
    """A 1.0 StreamResponse (``{"task"|"statusUpdate"|"artifactUpdate"|"message": ...}``) as
    the 0.3 event it stands for; a status in ``final_states`` is ``final``."""
    if "task" in result:
        return task(result["task"])
    if "statusUpdate" in result:
        update = result["statusUpdate"]
        final = update["status"]["state"] in final_states
        return {
            **update,
            "kind": "status-update",
            "status": _status(update["status"]),
            "final": final,
        }
    if "artifactUpdate" in result:
        update = result["artifactUpdate"]
        return {**update, "kind": "artifact-update", "artifact": _artifact(update["artifact"])}
    if "message" in result:
        return _message(result["message"])
    return result


def result(method: str, value: Any) -> Any:
    """A 1.0 unary result as 0.3 answers it: ``message/send`` bare, not wrapped."""
    if method == "SendMessage":
        return event(value)
    if method in ("GetTask", "CancelTask"):
        return task(value)
    return value


def _envelope(raw: bytes, reshape: Any) -> Any:
    envelope = media.decode_any(raw)
    if isinstance(envelope, dict) and "result" in envelope:
        envelope["result"] = reshape(envelope["result"])
    return envelope


def _frames(chunks: Iterator[bytes], method: str) -> Iterator[bytes]:
    """The 1.0 handler's body, reshaped: SSE ``data:`` frames as events, a blocking answer as
    its result; keep-alive spaces and comments go through untouched."""
    # A resubscription goes on through a question: only a terminal status is its last.
    final = TERMINAL_NAMES if method == "SubscribeToTask" else FINAL
    for chunk in chunks:
        if chunk.startswith(b"data: "):
            yield sse.data(_envelope(chunk[len(b"data: ") :], partial(event, final_states=final)))
        elif chunk.lstrip().startswith(b"{"):
            yield media.encode(_envelope(chunk, lambda value: result(method, value)))
        else:
            yield chunk


def reshape(resp: falcon.Response, method: str) -> None:
    """Turn the answer a 1.0 handler left on ``resp`` into its 0.3 form."""
    if resp.stream is not None:
        resp.stream = _frames(iter(resp.stream), method)  # type: ignore[arg-type]
    elif isinstance(resp.media, dict) and "result" in resp.media:
        resp.media = {**resp.media, "result": result(method, resp.media["result"])}
