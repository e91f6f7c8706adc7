"""The parts of an inbound A2A message, read into the run's prompt (design.md §5.2)."""

from __future__ import annotations

import base64
import json

import msgspec

from adapters.http import inbound
from adapters.http.errors import CONTENT_TYPE_UNSUPPORTED, INVALID_PARAMS, RpcError


def prompt_text(parts: list[inbound.PartIn]) -> str:
    texts = []
    for part in parts:
        if isinstance(part.text, str):
            texts.append(part.text)
        elif part.data is not msgspec.UNSET:
            # The prompt text, not an HTTP body: kept as the stdlib writes it, as before.
            texts.append(json.dumps(part.data))
        elif isinstance(part.raw, str):
            try:
                raw = base64.b64decode(part.raw, validate=True)
            except ValueError:
                raise RpcError(INVALID_PARAMS, "raw parts must be base64") from None
            try:
                texts.append(raw.decode())
            except UnicodeDecodeError:
                raise RpcError(
                    CONTENT_TYPE_UNSUPPORTED, "only UTF-8 text is supported in raw parts"
                ) from None
        else:  # a url part, or a kind this server does not know: the source's -32005
            raise RpcError(
                CONTENT_TYPE_UNSUPPORTED, "only text, data and raw text parts are supported"
            )
    return "\n".join(texts)
