"""Server-signed checkpoints (ADR 0040): with ``FOLDLINE_CHECKPOINT_KEY`` the lease holder
signs the log's tree head every ``FOLDLINE_CHECKPOINT_EVERY`` events or
``FOLDLINE_CHECKPOINT_INTERVAL_S`` seconds, whichever comes first, at a lease renewal.

A checkpoint is signed only if the log grew since the last one by more than that checkpoint's
own event, and only if the new tree is consistent with the last signed one (a consistency
proof from its size and root to the new head, checked with ``merkle.verify_consistency``):
a log that was cut short or rewritten is never signed over, nor is a kept note this key did
not sign; the refusal is logged as an error (remove the kept note to start a new series).
The holder records it as ``lease.checkpoint_signed`` (so a checkpoint of size n is followed
by its own event at n + 1) and keeps the note, replaced whole, beside the log's anchor in the
state directory, where it survives the workspace and where ``GET /v1/checkpoint`` reads it.

The head and the consistency proof come from ``open_tree``, which reads the stored tree nodes
(``engine.merkle.nodes``): the runtime extends them at every renewal, key or no key, just
before it asks for a checkpoint, so a signing hashes only the last partial block and reads a
few dozen rows instead of rehashing the log.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime
from pathlib import Path

from adapters.system import tracing
from engine import merkle
from engine.audit.note import Signer, TreeHead, open_note, parse_checkpoint, sign_note
from engine.audit.source import Reader
from engine.errors import InvalidArgument
from engine.merkle.tree import LogTree, open_tree
from engine.storage.durable import fsync_dir

log = logging.getLogger("foldline.checkpoints")


def checkpoint_file(anchor: Path) -> Path:
    """Where the latest signed note lives: beside the anchor, ``<anchor stem>.checkpoint``."""
    return anchor.with_suffix(".checkpoint")


def read_note(path: Path) -> str | None:
    """The latest signed note kept at ``path`` (None: none yet, or unreadable)."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as ex:
        log.error("the checkpoint %s cannot be read: %s", path, ex)
        return None


def kept_size(path: Path) -> int | None:
    """The size the note kept at ``path`` signs (None: none yet, or not a checkpoint). The
    signature is not checked: this server wrote the file, outside the runs' reach."""
    note = read_note(path)
    if note is None:
        return None
    try:
        return parse_checkpoint(note.partition("\n\n")[0] + "\n").size
    except InvalidArgument:
        return None


def write_note(path: Path, note: str) -> None:
    """Replace the kept note whole: a temporary file, fsynced, renamed over (0600)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(descriptor, note.encode("utf-8"))
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    fsync_dir(path.parent)  # the kept note's name survives a power cut (ADR 0055)


def is_consistent(last: TreeHead, tree: LogTree) -> bool:
    """Does ``tree`` extend the tree ``last`` signed? Checked by a proof, as an auditor would."""
    if not 0 < last.size <= tree.size:
        return False
    proof = tree.consistency(last.size, tree.size)
    return merkle.verify_consistency(last.size, tree.size, proof, last.root, tree.root())


class Checkpointer:
    """Decides when to sign, and signs; the caller records the event and keeps the note."""

    def __init__(self, signer: Signer, every: int, interval_s: float, path: Path) -> None:
        self.signer = signer
        self.every = every
        self.interval_s = interval_s
        self.path = path
        self._signed_at: datetime | None = None  # this process's last signing (or first look)

    def latest(self) -> TreeHead | None:
        """The last signed checkpoint kept beside the anchor (None: none yet).

        Raises:
            InvalidArgument: the file is there but is not a checkpoint this key signed.
        """
        note = read_note(self.path)
        if note is None:
            return None
        try:
            return parse_checkpoint(open_note(note, self.signer.verifier))
        except InvalidArgument as ex:
            raise InvalidArgument(f"{self.path}: not a checkpoint this key signed: {ex}") from ex

    def is_due(self, head: int, last: TreeHead | None, now: datetime) -> bool:
        """At least ``every`` events since the last checkpoint, or ``interval_s`` seconds since
        this process signed (or first looked), and more new than the checkpoint's own event."""
        new = head - (last.size if last is not None else 0)
        if self._signed_at is None:
            self._signed_at = now  # a restart waits its interval (or its events) afresh
            if last is None:
                return head > 0
        if new <= (1 if last is not None else 0):
            return False
        return new >= self.every or (now - self._signed_at).total_seconds() >= self.interval_s

    def sign(self, reader: Reader, now: datetime) -> tuple[TreeHead, str] | None:
        """The new tree head and its signed note, if one is due and consistent; else None.

        A tree that does not extend the last signed checkpoint is refused (an error logged).
        """
        try:
            last = self.latest()
        except InvalidArgument as ex:  # never sign over what cannot be judged
            log.error("checkpoint refused: %s", ex.message)
            return None
        if not self.is_due(reader.head(), last, now):
            return None
        # A span per signing (ADR 0059), never per renewal: most renewals have none due.
        with tracing.span("checkpoint.sign", root=True) as span:
            signed = self._sign(reader, last, now)
            span.set("foldline.size", signed[0].size if signed else None)
            span.set("foldline.positions", [signed[0].size] if signed else None)
            if signed is None:
                span.fail("refused: the tree does not extend the last checkpoint")
        return signed

    def _sign(
        self, reader: Reader, last: TreeHead | None, now: datetime
    ) -> tuple[TreeHead, str] | None:
        tree = open_tree(reader)
        if last is not None and not is_consistent(last, tree):
            log.error(
                "checkpoint refused: the log's tree of %d events does not extend the signed"
                " checkpoint of %d events in %s",
                tree.size,
                last.size,
                self.path,
            )
            return None
        head = TreeHead(self.signer.name, tree.size, tree.root())
        self._signed_at = now
        return head, sign_note(head.text(), self.signer)
