"""``foldline backup LOG DEST [--follow]``: ship new events, by position, to a replica.

The replica is a foldline log file (``DEST/replica.db``) holding the source's ``events`` and
``commands`` rows as stored, its own stored tree nodes, and ``replica_checkpoints``: the size
and tree head after every shipped batch. A batch is shipped in one transaction on the
replica, synced (``synchronous=FULL``), and only after two checks, so the replica never holds
a row it has not proved:

1. the rows link into the chain from the hash the replica holds at its last position;
2. the source's consistency proof from the replica's last checkpoint to the new size verifies
   against the replica's recorded head and the head the replica computes over its own rows
   (old ones and the batch): the source still holds the history the replica already has.

A kill of either side loses nothing: the replica's last committed batch is where the next run
starts (a batch is all or nothing), and the source is only read.

Raises (every function): ``ChainBroken`` when a check fails: nothing of that batch is kept.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import chain, merkle
from engine.audit.source import COLUMNS, Reader, open_reader
from engine.clock import Clock, SystemClock, format_time, parse_time
from engine.errors import ChainBroken, InvalidArgument
from engine.merkle.nodes import INSERT_NODES, nodes_to_add
from engine.merkle.proofs import b64
from engine.merkle.tree import open_tree
from engine.storage import Storage, open_storage, parse_target
from engine.storage.durable import make_dirs

REPLICA_FILE = "replica.db"
BATCH = 5000  # rows per shipped transaction: bounds a batch's memory and the replica's lock
CHECKPOINTS_DDL = (
    "CREATE TABLE IF NOT EXISTS replica_checkpoints (size INTEGER PRIMARY KEY, root BLOB NOT"
    " NULL, shipped_at TEXT NOT NULL, source TEXT NOT NULL)"
)
_ROWS = f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?"
_COMMANDS = (
    "SELECT command_id, stream_id, first_position, last_position FROM commands"
    " WHERE last_position > ? AND last_position <= ?"
)


@dataclass(frozen=True)
class Shipped:
    """One batch made durable on the replica."""

    first: int
    last: int
    root: bytes
    lag_seconds: float  # replica commit time minus the recorded_at of the batch's last event
    behind: int  # events the source held beyond the batch when it was committed

    def to_json(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "last": self.last,
            "root": b64(self.root),
            "lag_seconds": round(self.lag_seconds, 3),
            "behind": self.behind,
        }


def replica_file(dest: str | os.PathLike[str]) -> str:
    """The replica's file: ``DEST/replica.db``, or DEST itself when it names a ``.db`` file."""
    text = os.fspath(dest)
    return text if text.endswith(".db") else os.path.join(text, REPLICA_FILE)


@dataclass
class _CursorSource:
    """A tree ``Source`` over a cursor inside a write transaction: the replica's rows, old and
    just inserted, as that transaction sees them."""

    path: str
    cursor: Any
    schema: int = 2

    def head(self) -> int:
        return int(
            self.cursor.execute("SELECT coalesce(max(position), 0) FROM events").fetchall()[0][0]
        )

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> Iterable[Any]:
        found: list[Any] = self.cursor.execute(sql, params).fetchall()
        return found


class Replica:
    """The replica's file, opened to write (made, with its folders, durably when new)."""

    def __init__(self, dest: str | os.PathLike[str], clock: Clock | None = None) -> None:
        self.path = os.path.abspath(replica_file(dest))
        if parse_target(self.path).remote:
            raise InvalidArgument("a replica is a directory or a .db file, not a URL")
        make_dirs(Path(self.path).parent)
        self.clock = clock or SystemClock()
        self.storage: Storage = open_storage(self.path, sync="full")
        try:
            self.storage.migrate(format_time(self.clock.now()))
            writer = self.storage.writer()
            writer.begin()
            writer.cursor.execute(CHECKPOINTS_DDL)
            writer.commit()
        except BaseException:
            self.storage.close()
            raise

    def size(self) -> int:
        return self.storage.max_position()

    def checkpoint(self) -> tuple[int, bytes]:
        """The replica's last checkpoint: its size and tree head."""
        size = self.size()
        rows = (
            self.storage.connection()
            .execute("SELECT root FROM replica_checkpoints WHERE size = ?", (size,))
            .fetchall()
        )
        if rows:
            return size, bytes(rows[0][0])
        with self.storage.content_cursor() as cursor:
            return size, open_tree(_CursorSource(self.path, cursor), size).root()

    def close(self) -> None:
        self.storage.close()


def ship(source: Reader, replica: Replica, limit: int = BATCH) -> Shipped | None:
    """Ship the source's next rows (at most ``limit``) after the replica's last position;
    None when there are none.

    Raises:
        ChainBroken: the rows do not link to the replica's last hash, or the source's tree does
            not extend the replica's last checkpoint.
    """
    old, old_root = replica.checkpoint()
    rows = [tuple(row) for row in source.query(_ROWS, (old, limit))]
    if not rows:
        return None
    new = rows[-1][0]
    previous = replica.storage.hash_at(old) if old else chain.GENESIS
    broken = next(iter(chain.check_rows(rows, previous or b"", old)), None)
    if broken is not None:
        raise ChainBroken(
            f"{source.path}: position {broken.position}: {broken.kind}: {broken.detail}"
            f" (the replica holds 1..{old})"
        )
    tree = open_tree(source, new)
    proof = tree.consistency(old, new) if old else []
    commands = [tuple(row) for row in source.query(_COMMANDS, (old, new))]
    writer = replica.storage.writer()
    writer.begin()
    try:
        writer.insert_events(rows)
        writer.insert_commands(commands)
        mine = _CursorSource(replica.path, writer.cursor)
        new_root = open_tree(mine, new).root()
        if old and not merkle.verify_consistency(old, new, proof, old_root, new_root):
            raise ChainBroken(
                f"{source.path}: its tree of {new} events does not extend the replica's"
                f" checkpoint of {old}: history the replica holds was changed"
            )
        writer.cursor.executemany(INSERT_NODES, nodes_to_add(mine.rows, new, replica.path))
        now = replica.clock.now()
        writer.cursor.execute(
            "INSERT INTO replica_checkpoints VALUES (?, ?, ?, ?)",
            (new, new_root, format_time(now), source.path),
        )
        writer.commit()
    except BaseException:
        writer.rollback()
        raise
    lag = (replica.clock.now() - parse_time(rows[-1][4])).total_seconds()
    return Shipped(rows[0][0], new, new_root, lag, max(0, source.head() - new))


def check_extends(source: Reader, replica: Replica) -> None:
    """Whether the source still holds the history the replica has: its tree over the replica's
    size has the replica's last recorded head (checked at every start, before any batch).

    Raises:
        ChainBroken: it does not (a rewritten, cut or other log).
    """
    size, root = replica.checkpoint()
    head = source.head()
    if head < size:
        raise ChainBroken(f"{source.path}: holds {head} events, the replica {size}: cut short")
    if size and open_tree(source, size).root() != root:
        raise ChainBroken(
            f"{source.path}: its first {size} events do not have the replica's tree head:"
            " history the replica holds was changed, or this is another log"
        )


def follow(
    source_path: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    keep_following: Callable[[], bool],
    report: Callable[[Shipped], None],
    interval: float = 0.2,
    limit: int = BATCH,
) -> int:
    """Ship batches until the source has no more (``keep_following`` False) or for as long as
    ``keep_following()`` says (polling every ``interval`` seconds when caught up); returns the
    replica's size.

    Raises:
        NotALog: the source is not a SQLite foldline log.
        ChainBroken: as ``ship``; the replica keeps every batch shipped before.
    """
    if parse_target(source_path).remote:
        raise InvalidArgument(
            "backup ships a SQLite log; a PostgreSQL log is kept by the database's own"
            " point-in-time recovery (docs/operating.md, 'Backups')"
        )
    source = open_reader(source_path)
    replica = Replica(dest)
    try:
        archived = source.query("SELECT coalesce(min(position), 1) - 1 FROM events")[0][0]
        if replica.size() < archived:
            raise InvalidArgument(
                f"{source.path}: its events up to {archived} are archived and the replica holds"
                f" {replica.size()}: back up a whole copy (foldline archive LOG --join WHOLE.db)"
                " first, then follow the log"
            )
        check_extends(source, replica)
        while True:
            shipped = ship(source, replica, limit)
            if shipped is not None:
                report(shipped)
                continue
            if not keep_following():
                return replica.size()
            time.sleep(interval)
    finally:
        replica.close()
        source.close()
