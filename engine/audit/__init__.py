"""Audits of a log (design.md §10): verify, diff, checkpoints, the state at a point, export.

Every audit only reads its inputs. The raw commands read rows and never decode a payload
(``source``), so they work on a log of any machine; ``verify`` replays and refolds with the
declarations it is given (``verify``); ``diff`` compares two logs by content (``diff``);
``checkpoint`` makes and checks trust anchors (``checkpoint``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from engine.audit.anchor import Checkpoint, make_checkpoint, verify_against
from engine.audit.compare import Diff, diff
from engine.audit.source import COLUMNS, Reader, open_reader, reading
from engine.audit.verifier import UNJUDGED, Progress, Report, judge, verify

__all__ = [
    "UNJUDGED",
    "Checkpoint",
    "Diff",
    "Progress",
    "Reader",
    "Report",
    "diff",
    "export_line",
    "judge",
    "make_checkpoint",
    "open_reader",
    "reading",
    "state_at",
    "verify",
    "verify_against",
]


def state_at(
    reader: Reader, position: int | None = None, time: str | None = None
) -> dict[str, dict[str, Any]]:
    """Every stream's head as of a position (inclusive) or a recorded time (inclusive)."""
    heads: dict[str, dict[str, Any]] = {}
    rows: Iterator[Any] = reader.iter_rows()
    for row in rows:
        if (position is not None and row[0] > position) or (time is not None and row[4] > time):
            break
        heads[row[1]] = {
            "version": row[2],
            "state": row[7],
            "event_type": row[3],
            "position": row[0],
            "recorded_at": row[4],
        }
    return heads


_decode = msgspec.json.decode
_encode = msgspec.json.Encoder(order="sorted").encode


_FIELDS = tuple(COLUMNS.split(", "))


def _payload(payload: bytes) -> Any:
    try:
        return _decode(payload)
    except msgspec.DecodeError:  # not JSON (damaged, or written by hand): shown, not dropped
        return {"undecodable_payload_hex": payload.hex()}


def export_line(row: tuple[Any, ...]) -> bytes:
    """One event as canonical JSON (sorted keys at every level, the chain hash included). The
    payload is read as plain JSON, so no declaration is needed to export it."""
    record = dict(zip(_FIELDS, row, strict=True))
    record["event"] = _payload(bytes(record.pop("payload")))
    record["hash"] = bytes(record["hash"]).hex()
    return _encode(record)
