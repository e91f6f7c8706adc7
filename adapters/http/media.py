"""The one JSON codec of every HTTP surface: msgspec, installed as falcon's JSON media handler
(``resp.media``, ``req.get_media()``) and used by the responses that write their own bytes
(SSE frames, the A2A blocking answer, error bodies).

msgspec encodes Structs directly, so the ``/v1`` Structs and the plain dicts of the AgentCore
and A2A bodies go out through the same encoder.
"""

from __future__ import annotations

from typing import Any, TypeVar

import falcon
import falcon.media
import msgspec

T = TypeVar("T")

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()

HANDLER = falcon.media.JSONHandler(dumps=_ENCODER.encode, loads=_DECODER.decode)


def encode(value: Any) -> bytes:
    """``value`` (builtins or Structs) as compact UTF-8 JSON."""
    return _ENCODER.encode(value)


def encode_canonical(value: Any) -> bytes:
    """``value`` as compact JSON with object keys sorted: equal values, equal bytes (for
    digests such as the agent card's ETag)."""
    return msgspec.json.encode(value, order="sorted")


def decode(raw: bytes, into: type[T]) -> T:
    """``raw`` decoded and validated as ``into``.

    Raises:
        msgspec.DecodeError: not JSON (``msgspec.ValidationError``, a subclass: not ``into``).
    """
    return msgspec.json.decode(raw, type=into)


def decode_any(raw: bytes) -> Any:
    """``raw`` decoded as whatever JSON it holds. Raises ``msgspec.DecodeError``."""
    return _DECODER.decode(raw)


def install(app: falcon.App[Any, Any]) -> None:
    """Make this codec the app's JSON handler, for requests and responses."""
    app.req_options.media_handlers[falcon.MEDIA_JSON] = HANDLER
    app.resp_options.media_handlers[falcon.MEDIA_JSON] = HANDLER


def json_response(resp: falcon.Response, value: Any) -> None:
    """Answer ``value`` as the JSON body, encoded now (no content negotiation)."""
    resp.content_type = falcon.MEDIA_JSON
    resp.data = encode(value)
