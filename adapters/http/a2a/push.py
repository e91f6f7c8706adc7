"""A2A push notifications (ADR 0039): the config methods of both dialects, and the body each
delivery sends.

1.0: ``CreateTaskPushNotificationConfig``, ``Get...``, ``List...s``, ``Delete...``, whose params
and results are ``TaskPushNotificationConfig`` objects; 0.3: ``tasks/pushNotificationConfig/
{set,get,list,delete}``, whose shapes nest the config under ``pushNotificationConfig`` and
authenticate with a list of ``schemes``. A config is an event on its task; a URL the policy
refuses (``adapters.system.url_policy``) is -32602 with the reason.

A delivery sends, in its config's dialect, what the transition that owed it says: 1.0 a
``StreamResponse``, the final ``{"task"}`` for a terminal state and a ``{"statusUpdate"}``
otherwise; 0.3 the Task, with the status of that transition.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec

from adapters.http import media
from adapters.http.a2a import result_files, v03
from adapters.http.a2a.wire import STATE, FileParts, status_json, task_json
from adapters.http.errors import INVALID_PARAMS, PUSH, TASK_NOT_FOUND, RpcError, as_rpc
from adapters.http.inbound import PushConfigIn, refusal
from adapters.http.ports import ServerRuntime
from adapters.services.dispatch import new_id
from adapters.services.push import Payload
from adapters.settings.config import ServerConfig
from adapters.system.url_policy import UrlPolicy, UrlRefused
from engine.domain import push as push_
from engine.domain.errors import NotFound, TaskEnded
from engine.domain.rows import DeliveryRow, PushConfigRow
from engine.domain.task import TERMINAL
from engine.domain.task import TaskState as T
from projections import queries

CONFIG_TEXTS = {
    "$": "the push config must be an object with a url of 1 to 2048 characters",
    "$.id": "the push config id must be 1 to 200 letters, digits or _:.@-",
    "$.url": "the push config url must be a string of 1 to 2048 characters",
    "$.token": "the push config token must be visible ASCII without spaces, at most 4096"
    " characters",
    "$.authentication": "authentication must be an object with a scheme (letters, digits,"
    " ._~+/-) and credentials (visible ASCII without spaces)",
}


def push_config(policy: UrlPolicy, config: PushConfigIn) -> push_.PushConfig:
    """The config to record, its URL judged by the policy.

    Raises:
        RpcError: -32602, the URL refused.
    """
    try:
        policy.check(config.url)
    except UrlRefused as ex:
        raise RpcError(INVALID_PARAMS, f"push url not allowed: {ex}") from None
    auth = config.authentication
    return push_.PushConfig(
        config_id=config.id or new_id("push"),
        url=config.url,
        token=config.token,
        scheme=auth.scheme if auth else "",
        credentials=auth.credentials if auth else "",
        dialect=config.dialect,
    )


def _convert(value: Any) -> PushConfigIn:
    try:
        return msgspec.convert(value, PushConfigIn)
    except msgspec.ValidationError as ex:
        raise RpcError(INVALID_PARAMS, refusal(ex, CONFIG_TEXTS)) from None


def _string(params: dict[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value:
        raise RpcError(INVALID_PARAMS, f"{name} must be a non-empty string")
    return value


# -- the config methods -----------------------------------------------------------------------


# A config's token and credentials are never answered back: ``POST /`` is open to whoever can
# reach it (a run of this server included), and a caller that has them does not need them.


def config_json(row: PushConfigRow) -> dict[str, Any]:
    """A 1.0 ``TaskPushNotificationConfig``, without its secrets."""
    out: dict[str, Any] = {"id": row.config_id, "taskId": row.task_id, "url": row.url}
    if row.scheme:
        out["authentication"] = {"scheme": row.scheme}
    return out


def config_json_v03(row: PushConfigRow) -> dict[str, Any]:
    """A 0.3 ``TaskPushNotificationConfig``: the config nested, ``schemes`` a list."""
    config: dict[str, Any] = {"id": row.config_id, "url": row.url}
    if row.scheme:
        config["authentication"] = {"schemes": [row.scheme]}
    return {"taskId": row.task_id, "pushNotificationConfig": config}


def params_v03(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """0.3 params in their 1.0 form (``id`` is the task's there, the config's here)."""
    if method.endswith("/set"):
        config = params.get("pushNotificationConfig")
        if not isinstance(config, dict):
            raise RpcError(INVALID_PARAMS, "pushNotificationConfig must be an object")
        return {**v03.push_config_in(config), "taskId": _string(params, "taskId")}
    config_id = params.get("pushNotificationConfigId")
    if method.endswith("/delete"):
        config_id = _string(params, "pushNotificationConfigId")
    return {"taskId": _string(params, "id"), "id": config_id}


class PushMethods:
    """The config methods, over the runtime's reads and commands; ``write`` takes the lease
    first."""

    def __init__(self, runtime: ServerRuntime, write: Callable[[], None]) -> None:
        self.runtime = runtime
        self.write = write

    @property
    def policy(self) -> UrlPolicy:
        return UrlPolicy(self.runtime.config.push_allow)

    def _task(self, task_id: str) -> None:
        if self.runtime.reads.task(task_id) is None:
            raise RpcError(TASK_NOT_FOUND, f"Task {task_id} not found", {"taskId": task_id})

    def _row(self, task_id: str, config_id: str | None) -> PushConfigRow:
        self._task(task_id)
        if config_id is None:  # 0.3: the task's one config (its first)
            rows = self.runtime.reads.push_configs(task_id)
            row = rows[0] if rows else None
        else:
            row = self.runtime.reads.push_config(task_id, config_id)
        if row is None:
            raise RpcError(TASK_NOT_FOUND, f"push config not found: {config_id or task_id}")
        return row

    def create(self, params: dict[str, Any]) -> PushConfigRow:
        task_id = _string(params, "taskId")
        config = push_config(self.policy, _convert(params))
        self._task(task_id)
        self.write()
        try:
            self.runtime.handle(
                push_.SetPushConfig(task_id=task_id, **msgspec.structs.asdict(config))
            )
        except (NotFound, TaskEnded) as ex:
            raise as_rpc(ex, PUSH) from None
        return self._row(task_id, config.config_id)

    def get(self, params: dict[str, Any], *, legacy: bool = False) -> PushConfigRow:
        config_id = params.get("id")
        if not legacy or config_id is not None:
            config_id = _string(params, "id")
        return self._row(_string(params, "taskId"), config_id)

    def list(self, params: dict[str, Any]) -> list[PushConfigRow]:
        task_id = _string(params, "taskId")
        self._task(task_id)
        return self.runtime.reads.push_configs(task_id)

    def delete(self, params: dict[str, Any]) -> None:
        """Delete a config of a known task; idempotent (§3.1.10): a config already gone, or
        never made, is deleted already, and nothing is recorded.

        Raises:
            RpcError: -32001, the task is unknown.
        """
        task_id, config_id = _string(params, "taskId"), _string(params, "id")
        self._task(task_id)
        if self.runtime.reads.push_config(task_id, config_id) is None:
            return
        self.write()
        with contextlib.suppress(NotFound):  # deleted meanwhile: as wanted
            self.runtime.handle(push_.DeletePushConfig(task_id=task_id, config_id=config_id))

    def answer(self, method: str, params: dict[str, Any]) -> Any:
        """The result of a config method of either dialect."""
        if method in v03.PUSH_METHODS:
            return self._answer_v03(method, params)
        if method == "CreateTaskPushNotificationConfig":
            return config_json(self.create(params))
        if method == "GetTaskPushNotificationConfig":
            return config_json(self.get(params))
        if method == "ListTaskPushNotificationConfigs":
            return {"configs": [config_json(r) for r in self.list(params)], "nextPageToken": ""}
        self.delete(params)
        return {}

    def _answer_v03(self, method: str, params: dict[str, Any]) -> Any:
        converted = params_v03(method, params)
        verb = method.rsplit("/", 1)[1]
        if verb == "set":
            return config_json_v03(self.create(converted))
        if verb == "get":
            return config_json_v03(self.get(converted, legacy=True))
        if verb == "list":
            return [config_json_v03(r) for r in self.list(converted)]
        self.delete(converted)
        return None


METHODS = frozenset(
    {
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    }
)


# -- what a delivery sends --------------------------------------------------------------------


def payload(conn: Any, delivery: DeliveryRow, files: FileParts | None = None) -> bytes:
    """The body of ``delivery``, in its config's dialect (see the module's docstring), with
    the result's ``files`` parts (``result_files``) when given."""
    record = queries.task(conn, delivery.task_id)
    if record is None:
        raise LookupError(f"task {delivery.task_id} is gone")
    state = T(delivery.task_state)
    status = status_json(
        record.task_id, record.session_id, state, delivery.status_text, delivery.at
    )
    if delivery.dialect == "0.3":
        told = task_json(record, files=files)
        if not (state == T.COMPLETED and record.reply is not None):  # keep a reply's parts
            told["status"] = status
        return media.encode(v03.task(told))
    if state in TERMINAL:
        return media.encode({"task": task_json(record, files=files)})
    update = {"taskId": record.task_id, "contextId": record.session_id, "status": status}
    return media.encode({"statusUpdate": update})


def payload_for(config: ServerConfig) -> Payload:
    """What this server's deliveries send (ADR 0039), handed to the runtime when it is built:
    a result's files as parts, as every other answer sends them (inline, or URLs on
    ``FOLDLINE_PUBLIC_URL``; never this server's bind address, which no receiver elsewhere
    reaches)."""
    return partial(payload, files=result_files.parts_for(config))


__all__ = ["METHODS", "STATE", "PushMethods", "payload", "payload_for", "push_config"]
