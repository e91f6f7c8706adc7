"""The inbound Structs answer with each surface's own texts, field by field."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from adapters.http.inbound import (
    INVOCATION_TEXTS,
    SEND_MESSAGE_TEXTS,
    InvocationIn,
    MessageIn,
    SendMessageIn,
    refusal,
)

OK_MESSAGE = {"messageId": "m", "parts": [{"text": "x"}]}


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b"[1]", "body must be a JSON object"),
        (b'{"get": null}', "get must be a non-empty string"),
        (b'{"get": ""}', "get must be a non-empty string"),
        (b'{"prompt": ""}', "prompt must be a non-empty string"),
        (b'{"prompt": 3}', "prompt must be a non-empty string"),
        (b'{"promptFile": 3}', "promptFile must be a string"),
        (b'{"prompt": "p", "session": 3}', "session must be a string of 1 to 200 characters"),
        (b'{"prompt": "p", "agent": ""}', "agent must be a string of 1 to 200 characters"),
        (
            b'{"prompt": "p", "id": "' + b"x" * 257 + b'"}',
            "id must be a string of 1 to 256 characters",
        ),
        (b'{"prompt": "p", "async": "yes"}', "async must be true or false"),
        (b'{"prompt": "p", "deliver": 1}', "deliver must be true or false"),
    ],
)
def test_inbound_invocation_refusals_keep_their_texts(body: bytes, text: str) -> None:
    with pytest.raises(msgspec.ValidationError) as refused:
        msgspec.json.decode(body, type=InvocationIn)
    assert refusal(refused.value, INVOCATION_TEXTS) == text


def test_inbound_invocation_tells_absent_from_null() -> None:
    absent = msgspec.json.decode(b'{"prompt": "p", "extra": 1}', type=InvocationIn)
    null = msgspec.json.decode(b'{"get": "j", "prompt": null}', type=InvocationIn)
    assert absent.get is msgspec.UNSET and absent.prompt == "p" and not absent.is_async
    assert absent.deliver  # a busy session keeps its work unless told not to (ADR 0048)
    assert null.prompt is None and null.prompt_file is msgspec.UNSET


@pytest.mark.parametrize(
    ("params", "text"),
    [
        ({}, "message is required"),
        ({"message": 3}, "message is required"),
        ({"message": {"parts": [{"text": "x"}]}}, "message.messageId must be a string of 1..200"),
        ({"message": {**OK_MESSAGE, "messageId": "x" * 201}}, "message.messageId must be a string"),
        ({"message": {**OK_MESSAGE, "role": "ROLE_AGENT"}}, "message.role must be ROLE_USER"),
        ({"message": {"messageId": "m"}}, "message.parts must be a non-empty list"),
        ({"message": {"messageId": "m", "parts": []}}, "message.parts must be a non-empty list"),
        ({"message": {"messageId": "m", "parts": [{}, 3]}}, "each part must be an object"),
        ({"message": {**OK_MESSAGE, "contextId": ""}}, "message.contextId must be a string of 1"),
        ({"message": {**OK_MESSAGE, "taskId": 7}}, "message.taskId must be a string of 1 to 200"),
        ({"message": OK_MESSAGE, "configuration": None}, "configuration must be an object"),
        (
            {"message": OK_MESSAGE, "configuration": {"historyLength": -1}},
            "historyLength must be an integer >= 0",
        ),
    ],
)
def test_inbound_send_message_refusals_keep_their_texts(params: dict[str, Any], text: str) -> None:
    with pytest.raises(msgspec.ValidationError) as refused:
        msgspec.convert(params, SendMessageIn)
    assert refusal(refused.value, SEND_MESSAGE_TEXTS).startswith(text)


def test_inbound_send_message_reads_what_the_sdk_sends() -> None:
    send = msgspec.convert(
        {
            "message": {**OK_MESSAGE, "role": "ROLE_USER", "contextId": "c", "metadata": {}},
            "configuration": {"returnImmediately": True, "historyLength": 0},
        },
        SendMessageIn,
    )
    assert send.message.context_id == "c" and send.message.parts[0].text == "x"
    assert send.configuration is not msgspec.UNSET and send.configuration.return_immediately


@pytest.mark.parametrize(
    ("metadata", "interrupt"),
    [
        (None, False),
        ({}, False),
        ({"halo/interrupt": "true"}, False),
        ({"halo/interrupt": 1}, False),
        ({"halo/interrupt": True}, True),
    ],
)
def test_inbound_message_interrupts_only_on_halo_interrupt_true(
    metadata: dict[str, object] | None, interrupt: bool
) -> None:
    message = msgspec.convert({**OK_MESSAGE, "metadata": metadata}, MessageIn)
    assert message.interrupt is interrupt
