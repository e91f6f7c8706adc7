"""``GET /v1/checkpoint`` and ``GET /v1/proofs/inclusion|consistency`` (ADR 0040): what a
monitor, a witness or an auditor polls. Open, without a token: a checkpoint is public, and a
proof holds only hashes and sizes.

The checkpoint is the latest signed note the lease holder keeps beside its anchor
(``adapters.services.checkpoints``), read from that file: a server that never activated opens
nothing. A proof reads the log read-only, on a connection of its own, and builds the tree per
request from the stored chain hashes (a fraction of a second at 10^5 events); its answer is the JSON
``foldline prove`` prints. ``size`` and ``new`` default to the latest checkpoint's size, so a
proof answers against what was signed, else to the log's head. A malformed or missing number
is a 400 ``invalid_argument``; a position or size the log does not hold a 404 ``out_of_range``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import falcon

from adapters.http import media
from adapters.http.errors import ApiError
from adapters.http.ports import ServerRuntime
from adapters.services import checkpoints
from adapters.settings.log_sources import reading
from engine.audit.source import Reader
from engine.errors import OutOfRange
from engine.keep.archive import inclusion as archived_inclusion
from engine.keep.archive import is_archived
from engine.merkle import proofs


def _latest(runtime: ServerRuntime) -> str | None:
    return checkpoints.read_note(runtime.checkpoint_path)


def _checkpoint_size(runtime: ServerRuntime) -> int | None:
    return checkpoints.kept_size(runtime.checkpoint_path)


def _number(req: falcon.Request, name: str, default: int | None) -> int | None:
    text = req.get_param(name)
    if text is None or text == "":
        return default
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise ApiError(falcon.HTTP_400, "invalid_argument", f"{name}={text!r}: not a number")
    return int(text)


def _required(req: falcon.Request, name: str) -> int:
    value = _number(req, name, None)
    if value is None:
        raise ApiError(falcon.HTTP_400, "invalid_argument", f"{name} is required")
    return value


def _answer(runtime: ServerRuntime, resp: falcon.Response, prove: Callable[[Reader], Any]) -> None:
    """``prove``'s JSON over the server's log, read-only (404 while there is no log)."""
    target = runtime.config.log_target
    if runtime.config.db_url is None and not os.path.exists(target):
        raise ApiError(falcon.HTTP_404, "not_found", "the log holds no events yet")
    with reading(str(target)) as reader:
        media.json_response(resp, prove(reader))


class Checkpoint:
    """``GET /v1/checkpoint``: the latest signed note, ``text/plain``; 404 before the first."""

    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        note = _latest(self.runtime)
        if note is None:
            raise ApiError(falcon.HTTP_404, "not_found", "no checkpoint has been signed yet")
        resp.content_type = "text/plain; charset=utf-8"
        resp.data = note.encode("utf-8")


class InclusionProof:
    """``GET /v1/proofs/inclusion?position=P&size=N``."""

    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        position = _required(req, "position")
        size = _number(req, "size", _checkpoint_size(self.runtime))
        target = str(self.runtime.config.log_target)
        local = self.runtime.config.db_url is None and os.path.exists(target)
        if local and is_archived(target, position):  # in a segment: proved from it (ADR 0062)
            media.json_response(resp, archived_inclusion(target, position, size))
            return
        _answer(
            self.runtime,
            resp,
            lambda reader: proofs.inclusion(reader, position, size, refuse=OutOfRange),
        )


class ConsistencyProof:
    """``GET /v1/proofs/consistency?old=O&new=N``."""

    def __init__(self, runtime: ServerRuntime) -> None:
        self.runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        old = _required(req, "old")
        new = _number(req, "new", _checkpoint_size(self.runtime))
        _answer(
            self.runtime,
            resp,
            lambda reader: proofs.consistency(reader, old, new, "new", OutOfRange),
        )
