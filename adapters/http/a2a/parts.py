"""The parts of an inbound A2A message: the prompt's text, and the files, loaded and checked.

Text and data parts are read into the run's prompt (design.md §5.2); file parts (``raw`` bytes
or a ``url``) are loaded and checked by ``adapters.http.a2a.message_files``.

Everything is read here, before the lease is taken and before any task exists: a part over its
limit, a refused URL or a failed fetch is -32602 and nothing is stored. A ``raw`` part is always
a file, even when its bytes are UTF-8 text: the caller sent a file (with its name and type),
and pasting up to 5 MB into the prompt is not what it asked for.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec

from adapters.http import inbound
from adapters.http.a2a import message_files
from adapters.http.a2a.message_files import FetchFailed, LoadedFile
from adapters.http.errors import CONTENT_TYPE_UNSUPPORTED, INVALID_PARAMS, RpcError
from adapters.system.url_policy import UrlPolicy, UrlRefused


def _text(value: Any, index: int, field: str) -> str | None:
    if value is msgspec.UNSET or value is None:
        return None
    if not isinstance(value, str):
        raise RpcError(INVALID_PARAMS, f"part {index}: {field} must be a string")
    return value


def _raw(part: inbound.PartIn, index: int) -> LoadedFile:
    try:
        content = base64.b64decode(part.raw, validate=True)
    except ValueError:
        raise RpcError(INVALID_PARAMS, "raw parts must be base64") from None
    filename = _text(part.filename, index, "filename")
    media_type = message_files.media_type_of(_text(part.media_type, index, "mediaType"), filename)
    return LoadedFile(index, filename, media_type, content)


def _fetched(part: inbound.PartIn, index: int, policy: UrlPolicy) -> LoadedFile:
    url = part.url
    try:
        content, served = message_files.fetch(url, policy)
    except (UrlRefused, FetchFailed) as ex:
        raise RpcError(INVALID_PARAMS, f"part {index}: {ex}") from None
    filename = _text(part.filename, index, "filename") or message_files.file_name_of(url)
    given = _text(part.media_type, index, "mediaType")
    return LoadedFile(
        index, filename, message_files.media_type_of(given, filename, served), content
    )


def read(parts: list[inbound.PartIn], policy: UrlPolicy) -> tuple[str, list[LoadedFile]]:
    """The prompt's text (the text and data parts, one per line) and the files, checked.

    Raises:
        RpcError: -32602 for a file over its limit, bad base64, a refused URL or a failed
            fetch; -32005 for a part with no content this server reads.
    """
    texts: list[str] = []
    files: list[LoadedFile] = []
    urls: list[tuple[int, inbound.PartIn]] = []
    total = 0
    for index, part in enumerate(parts):
        if isinstance(part.text, str):
            texts.append(part.text)
        elif part.data is not msgspec.UNSET:
            # The prompt text, not an HTTP body: kept as the stdlib writes it, as before.
            texts.append(json.dumps(part.data))
        elif isinstance(part.raw, str):
            files.append(_raw(part, index))
            total += len(files[-1].content)
            _check(index, len(files[-1].content), total)
        elif isinstance(part.url, str):
            urls.append((index, part))
        else:  # a kind this server does not know: the source's -32005
            raise RpcError(
                CONTENT_TYPE_UNSUPPORTED, "only text, data, raw and url parts are supported"
            )
    if len(urls) > message_files.URL_PARTS:  # each fetch may take its whole timeout
        raise RpcError(
            INVALID_PARAMS,
            f"a message may carry at most {message_files.URL_PARTS} url parts (it has {len(urls)})",
        )
    for index, part in urls:  # every URL's text first: a refused one costs no fetch
        try:
            policy.check(part.url)
        except UrlRefused as ex:
            raise RpcError(INVALID_PARAMS, f"part {index}: {ex}") from None
    for index, part in urls:
        files.append(_fetched(part, index, policy))
        total += len(files[-1].content)
        _check(index, len(files[-1].content), total)
    files.sort(key=lambda f: f.index)
    return "\n".join(texts), files


def _check(index: int, size: int, total: int) -> None:
    try:
        message_files.check_size(index, size, total)
    except ValueError as ex:
        raise RpcError(INVALID_PARAMS, str(ex)) from None
