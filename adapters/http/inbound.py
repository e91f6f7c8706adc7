"""The inbound bodies of ``POST /invocations`` and A2A ``SendMessage`` as msgspec Structs.

msgspec checks the shapes (types, lengths, required fields); its message names the JSON path
of the first problem, which ``refusal`` turns into the text each surface has always answered
(``prompt must be a non-empty string``, ``message.messageId must be a string of 1..200``, ...).
Rules that span fields (exactly one of ``prompt`` and ``promptFile``) stay in the handlers.
Unknown fields are ignored, as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

NonEmpty = Annotated[str, Meta(min_length=1)]
Short = Annotated[str, Meta(min_length=1, max_length=200)]


class InvocationIn(
    msgspec.Struct, kw_only=True, rename={"prompt_file": "promptFile", "is_async": "async"}
):
    """``POST /invocations``: a new job (``prompt`` or ``promptFile``) or a ``get``.

    ``UNSET`` tells an absent field from an explicit null where today's answers differ: a
    ``get`` beside any ``prompt`` key is refused, a null ``get`` is not a missing one.
    """

    get: NonEmpty | UnsetType = UNSET
    prompt: NonEmpty | UnsetType | None = UNSET
    prompt_file: str | UnsetType | None = UNSET
    session: Short | None = None
    agent: Short | None = None
    id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    is_async: bool = False
    # A busy session keeps its work (ADRs 0038, 0048): the prompt goes into the session's
    # running job when its run takes input, else the new job's run gets the superseded job's
    # prompts before its own. ``false``: a new job with its own prompt alone.
    deliver: bool = True


INVOCATION_TEXTS = {
    "$": "body must be a JSON object",
    "$.get": "get must be a non-empty string",
    "$.prompt": "prompt must be a non-empty string",
    "$.promptFile": "promptFile must be a string",
    "$.session": "session must be a string of 1 to 200 characters",
    "$.agent": "agent must be a string of 1 to 200 characters",
    "$.id": "id must be a string of 1 to 256 characters",
    "$.async": "async must be true or false",
    "$.deliver": "deliver must be true or false",
}


class PartIn(msgspec.Struct, kw_only=True, rename={"media_type": "mediaType"}):
    """One A2A part. Kept loose on purpose: the first of ``text`` (a string), ``data`` (any
    JSON), ``raw`` (base64 text) and ``url`` (a string) that is present is the part's content;
    ``filename`` and ``mediaType`` describe a file part (``raw`` or ``url``)."""

    text: Any = UNSET
    data: Any = UNSET
    raw: Any = UNSET
    url: Any = UNSET
    filename: Any = UNSET
    media_type: Any = UNSET


class MessageIn(msgspec.Struct, kw_only=True, rename="camel"):
    message_id: Short
    role: Literal["ROLE_USER"] | None = None
    parts: Annotated[list[PartIn], Meta(min_length=1)]
    context_id: Short | None = None
    task_id: Short | None = None
    # ``{"agent": "<name>"}`` picks a configured agent (FOLDLINE_AGENTS_FILE); else the default.
    metadata: dict[str, Any] | None = None

    @property
    def agent(self) -> str:
        chosen = (self.metadata or {}).get("agent")
        return chosen if isinstance(chosen, str) else ""

    @property
    def interrupt(self) -> bool:
        """``{"halo/interrupt": true}``: a follow-up delivered into a running agent interrupts
        its active turn first (ADR 0038)."""
        return (self.metadata or {}).get("halo/interrupt") is True


# A header value the server can send: visible ASCII, no space, no line break.
HeaderValue = Annotated[str, Meta(max_length=4096, pattern=r"^[!-~]*$")]


class AuthenticationIn(msgspec.Struct, kw_only=True):
    scheme: Annotated[str, Meta(max_length=100, pattern=r"^[A-Za-z0-9._~+/-]*$")] = ""
    credentials: HeaderValue = ""


class PushConfigIn(msgspec.Struct, kw_only=True):
    """A2A 1.0 ``TaskPushNotificationConfig`` (ADR 0039); ``dialect`` is set by the 0.3 edge,
    whose callers are sent 0.3 payloads."""

    id: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_:.@-]{1,200}$")] | None = None
    url: Annotated[str, Meta(min_length=1, max_length=2048)]
    token: HeaderValue = ""
    authentication: AuthenticationIn | None = None
    dialect: Literal["1.0", "0.3"] = "1.0"


class ConfigurationIn(msgspec.Struct, kw_only=True, rename="camel"):
    return_immediately: bool = False
    history_length: Annotated[int, Meta(ge=0)] | None = None
    task_push_notification_config: PushConfigIn | None = None


class SendMessageIn(msgspec.Struct, kw_only=True):
    """``params`` of ``SendMessage`` and ``SendStreamingMessage``."""

    message: MessageIn
    configuration: ConfigurationIn | UnsetType = UNSET


SEND_MESSAGE_TEXTS = {
    "$": "params must be an object",
    "$.message": "message is required",
    "$.message.messageId": "message.messageId must be a string of 1..200",
    "$.message.role": "message.role must be ROLE_USER",
    "$.message.parts": "message.parts must be a non-empty list",
    "$.message.parts[]": "each part must be an object",
    "$.message.contextId": "message.contextId must be a string of 1 to 200 characters",
    "$.message.taskId": "message.taskId must be a string of 1 to 200 characters",
    "$.configuration": "configuration must be an object",
    "$.configuration.historyLength": "historyLength must be an integer >= 0",
    "$.configuration.returnImmediately": "configuration.returnImmediately must be true or false",
    "$.configuration.taskPushNotificationConfig": "taskPushNotificationConfig must be an object"
    " with a url of 1 to 2048 characters",
    "$.configuration.taskPushNotificationConfig.id": "taskPushNotificationConfig.id must be 1 to"
    " 200 letters, digits or _:.@-",
    "$.configuration.taskPushNotificationConfig.token": "taskPushNotificationConfig.token must be"
    " visible ASCII without spaces, at most 4096 characters",
    "$.configuration.taskPushNotificationConfig.authentication": "authentication must be an"
    " object with a scheme (letters, digits, ._~+/-) and credentials (visible ASCII without"
    " spaces)",
}

_AT = re.compile(r" - at `(?P<path>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`")
_INDEX = re.compile(r"\[\d+\]")


def problem_path(error: msgspec.ValidationError) -> str:
    """The JSON path msgspec names, with a missing field as its own path and list indexes
    dropped: ``$.message.parts[]`` for any part."""
    text = str(error)
    at = _AT.search(text)
    path = at.group("path") if at else "$"
    missing = _MISSING.match(text)
    if missing:
        path = f"{path}.{missing.group('field')}"
    return _INDEX.sub("[]", path)


def refusal(error: msgspec.ValidationError, texts: Mapping[str, str]) -> str:
    """The surface's own text for the problem: the most specific path it has a text for."""
    path = problem_path(error)
    while path not in texts and path != "$":
        path = path.rsplit("[", 1)[0] if path.endswith("]") else path.rsplit(".", 1)[0]
    return texts.get(path, str(error))
