"""Checkpoints: a small trust anchor an auditor keeps outside the log.

A checkpoint names a position and the chain hash stored there. Every hash covers every row
before it, so a log that still holds that hash at that position, with a chain that recomputes
to it from the genesis, holds exactly the history the auditor saw, and a verify of everything
after it proves the rest. Anyone who edits a row before the checkpoint must either leave a
broken link or rewrite the hashes up to it, and then the hash at the position is not the kept
one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import msgspec

from engine.audit.source import reading
from engine.chain import Violation
from engine.errors import InvalidArgument

FORMAT = "foldline-checkpoint/1"
SERVER_FORMAT = "foldline-anchor/1"


class Checkpoint(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: str
    position: int
    hash: str  # hex sha256 stored at ``position``
    recorded_at: str
    streams: int | None  # stream heads at ``position``; None: not kept (a server's anchor)


class ServerAnchor(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a server last saw of its log, kept outside the workspace
    (``adapters.system.log_anchor``): a checkpoint of its head, plus the file it was read from."""

    format: str
    position: int
    hash: str
    recorded_at: str
    db: str
    device: int
    inode: int

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(FORMAT, self.position, self.hash, self.recorded_at, None)


def make_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """The anchor of a log's current head (take it when ``verify`` has just passed)."""
    with reading(path) as reader:
        rows = reader.query(
            "SELECT position, hash, recorded_at FROM events ORDER BY position DESC LIMIT 1"
        )
        if not rows:
            raise InvalidArgument(
                f"{os.fspath(path)}: the log is empty, there is nothing to anchor"
            )
        position, digest, recorded_at = rows[0]
        streams = reader.query(
            "SELECT count(DISTINCT stream_id) FROM events WHERE position <= ?", (position,)
        )[0][0]
    return Checkpoint(FORMAT, position, bytes(digest).hex(), recorded_at, streams)


def encode(checkpoint: Checkpoint) -> bytes:
    return msgspec.json.format(msgspec.json.encode(checkpoint), indent=2)


class _Format(msgspec.Struct):
    format: str


def load(text: bytes) -> Checkpoint:
    """A checkpoint, or a server's anchor read as the checkpoint it holds.

    Raises InvalidArgument: neither."""
    try:
        kind = msgspec.json.decode(text, type=_Format).format
        if kind == SERVER_FORMAT:
            checkpoint = msgspec.json.decode(text, type=ServerAnchor).checkpoint()
        else:
            checkpoint = msgspec.json.decode(text, type=Checkpoint)
    except msgspec.DecodeError as ex:
        raise InvalidArgument(f"not a foldline checkpoint: {ex}") from ex
    if checkpoint.format != FORMAT or checkpoint.position < 1:
        raise InvalidArgument(f"not a foldline checkpoint (format {checkpoint.format!r})")
    return checkpoint


def verify_against(
    path: str | os.PathLike[str], checkpoint: Checkpoint, violations: Sequence[Violation]
) -> Violation | None:
    """Does the log extend ``checkpoint``? ``violations`` are the log's own (from ``verify``):
    any break of the chain at or before the checkpoint means the hash stored there no longer
    follows from the rows. None when it does; the reason otherwise."""
    at = checkpoint.position
    broken = [
        v for v in violations if v.kind in ("hash_mismatch", "position_gap") and v.position <= at
    ]
    with reading(path) as reader:
        rows: list[Any] = reader.query(
            "SELECT hash, recorded_at FROM events WHERE position = ?", (at,)
        )
        streams = reader.query(
            "SELECT count(DISTINCT stream_id) FROM events WHERE position <= ?", (at,)
        )[0][0]
    if not rows:
        reason = "the log no longer reaches that position"
    elif bytes(rows[0][0]).hex() != checkpoint.hash:
        reason = "a different hash is stored there: the history before it was rewritten"
    elif broken:
        reason = f"the chain breaks at position {broken[0].position}, before the checkpoint"
    elif rows[0][1] != checkpoint.recorded_at or checkpoint.streams not in (None, streams):
        reason = "the row or the streams there differ from the checkpoint"
    else:
        return None
    return Violation(at, "checkpoint_mismatch", f"does not extend the checkpoint at {at}: {reason}")
