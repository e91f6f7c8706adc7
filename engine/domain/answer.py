"""What a run answers beyond its text (ADR 0054): artifacts of any parts, a direct message, a
refusal, a request for authorization. The shapes, their limits, and how artifact chunks fold.

A ``Part`` is exactly one of: ``text``; ``data`` (a JSON object); a file by its bytes (``raw``,
base64) or by a URL the caller follows (``url``, never fetched here), each with an optional
``filename`` and ``media_type``. An artifact is named by its ``artifact_id``; a chunk with
``append`` adds its parts to the artifact's, any other replaces the artifact whole
(A2A ``TaskArtifactUpdateEvent``). Nothing here does IO.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import msgspec

from engine.errors import InvalidArgument

# An answer is an event, and the log takes events of at most 1 MiB: one chunk of an artifact,
# or one message, is at most CHUNK_LIMIT characters of JSON, all its parts together.
CHUNK_LIMIT = 786_432
DATA_LIMIT = 262_144  # characters of a data part, as compact JSON
RAW_LIMIT = 524_288  # bytes of a file part sent by its bytes (decoded): 683 KiB of base64
SUMMARY_LIMIT = 1000  # characters of a message's text kept as its task's result
URL_LIMIT = 2048  # characters of a file part's URL
NAME_LIMIT = 255  # characters of a filename or a media type
PARTS_LIMIT = 100  # parts in one artifact chunk or message
DEPTH_LIMIT = 32  # how deep a data part nests: every reader parses it again


class Part(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One part of an artifact or a message: exactly one of ``text``, ``data``, ``raw``,
    ``url``; ``filename`` and ``media_type`` only with a file."""

    text: str | None = None
    data: dict[str, Any] | None = None
    raw: str | None = None  # base64
    url: str | None = None
    filename: str | None = None
    media_type: str | None = None

    @property
    def is_file(self) -> bool:
        return self.raw is not None or self.url is not None


class Artifact(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An artifact as its chunks so far made it."""

    artifact_id: str
    name: str = ""
    description: str = ""
    parts: tuple[Part, ...] = ()


def check_part(part: Part, where: str) -> None:
    """Refuse a part that is not exactly one kind, or is past its limit.

    Raises:
        InvalidArgument: naming ``where`` (``part 2 of artifact 'a'``) and what is wrong.
    """
    kinds = [k for k in ("text", "data", "raw", "url") if getattr(part, k) is not None]
    if len(kinds) != 1:
        raise InvalidArgument(f"{where}: a part is exactly one of text, data, raw, url")
    if not part.is_file and (part.filename is not None or part.media_type is not None):
        raise InvalidArgument(f"{where}: filename and mediaType belong to a file part")
    for name in ("filename", "media_type"):
        value = getattr(part, name)
        if value is not None and not 1 <= len(value) <= NAME_LIMIT:
            raise InvalidArgument(f"{where}: {name} is 1 to {NAME_LIMIT} characters")
    if part.data is not None:
        _check_data(part.data, where)
    if part.raw is not None:
        _check_raw(part.raw, where)
    if part.url is not None:
        _check_url(part.url, where)


def _check_data(data: dict[str, Any], where: str) -> None:
    if _depth(data) > DEPTH_LIMIT:  # first: encoding it recurses
        raise InvalidArgument(f"{where}: a data part nests at most {DEPTH_LIMIT} levels deep")
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if len(text) > DATA_LIMIT:
        raise InvalidArgument(f"{where}: a data part is at most {DATA_LIMIT} characters of JSON")


def _depth(value: Any) -> int:
    """How deep ``value`` nests its lists and objects, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def raw_size(raw: str) -> int:
    """How many bytes base64 ``raw`` holds, counted without decoding it."""
    return len(raw) * 3 // 4 - raw[-2:].count("=")


def _check_raw(raw: str, where: str) -> None:
    if raw_size(raw) > RAW_LIMIT:
        raise InvalidArgument(f"{where}: a file by its bytes is at most {RAW_LIMIT} bytes")
    try:
        base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(f"{where}: raw must be base64") from None


def _check_url(url: str, where: str) -> None:
    scheme = url.split(":", 1)[0].lower()
    if scheme not in ("http", "https") or len(url) > URL_LIMIT or "://" not in url:
        raise InvalidArgument(f"{where}: a file URL is http(s), at most {URL_LIMIT} characters")


def check_parts(parts: tuple[Part, ...], what: str) -> None:
    """Refuse an empty or too long list of parts, or any part ``check_part`` refuses.

    Raises:
        InvalidArgument: naming ``what`` and the part.
    """
    if not 1 <= len(parts) <= PARTS_LIMIT:
        raise InvalidArgument(f"{what} has 1 to {PARTS_LIMIT} parts")
    for n, part in enumerate(parts):
        check_part(part, f"part {n} of {what}")
    if len(msgspec.json.encode(parts)) > CHUNK_LIMIT:
        raise InvalidArgument(f"{what} is at most {CHUNK_LIMIT} characters of JSON in all")


def folded(
    artifacts: tuple[Artifact, ...],
    artifact_id: str,
    parts: tuple[Part, ...],
    *,
    append: bool,
    name: str = "",
    description: str = "",
) -> tuple[Artifact, ...]:
    """``artifacts`` after one chunk: appended to the artifact of that id (a first chunk of
    an id that is not there yet starts it), or replacing it; a new id goes last."""
    for n, old in enumerate(artifacts):
        if old.artifact_id == artifact_id:
            new = Artifact(
                artifact_id=artifact_id,
                name=name or old.name,
                description=description or old.description,
                parts=(*old.parts, *parts) if append else parts,
            )
            return (*artifacts[:n], new, *artifacts[n + 1 :])
    new = Artifact(artifact_id=artifact_id, name=name, description=description, parts=parts)
    return (*artifacts, new)


def summary_of(parts: tuple[Part, ...]) -> str:
    """A message's text parts, joined and cut to ``SUMMARY_LIMIT``: its task's ``result``
    (the parts themselves are the answer)."""
    return "\n".join(part.text for part in parts if part.text is not None)[:SUMMARY_LIMIT]
