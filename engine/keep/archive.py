"""``foldline archive LOG --before CHECKPOINT``: move the events a checkpoint covers into a sealed
segment, keep in the live log what appends, heads and proofs need, and give the space back.

At a checkpoint of ``m`` events whose tree head the log's first ``m`` chain hashes have:

- the segment (``engine.keep.segment``) holds positions ``s+1..m`` (``s``: the last position of
  the previous segment, 0 for the first), and its header the checkpoint, whose head is the
  tree over the segments' chain hashes ``1..m``;
- the live log deletes positions up to ``b``, the last whole block of ``engine.merkle.nodes``
  at or before ``m`` (``b = m - m % 256``): the stored tree nodes over ``1..b`` stay, so every
  tree head, inclusion proof of a live position and consistency proof from a size past ``b`` is
  answered by the live log alone, exactly as before (the frontier at the cut is those nodes);
  the events of ``b+1..m`` stay in both, so appends, the stream heads (``streams``), the read
  models and ``verify --since`` of a later checkpoint read what they always read;
- ``archive_cuts`` records each cut (``b``, the segment's name and range, the checkpoint's
  head), and ``archived_commands`` the outcome of every command whose events were moved, which
  the writer answers a repeated command id from (a command id is accepted once, forever);
- ``VACUUM`` gives the space back; the report says the file's size before and after.

An inclusion proof of an archived position is made from the segments (their chain hashes and
the live ones after them); ``joined`` writes the live log and its segments back into one whole
log, which ``foldline verify`` checks as it checks any. A projection cannot be refolded from a
live log whose first events are archived (``engine.projection`` refuses): join it first.

SQLite only: a PostgreSQL log is refused.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import chain
from engine.audit.note import TreeHead
from engine.audit.source import COLUMNS, Reader, open_reader
from engine.clock import SystemClock, format_time
from engine.errors import ChainBroken, InvalidArgument, NotALog
from engine.keep.segment import Segment, read_segment, write_segment
from engine.merkle.nodes import BLOCK, INSERT_NODES, nodes_to_add
from engine.merkle.proofs import b64
from engine.merkle.tree import LogTree, open_tree, read_leaves
from engine.storage import open_storage, parse_target
from engine.storage.durable import make_dirs

CUTS_DDL = """
CREATE TABLE IF NOT EXISTS archive_cuts (
    cut         INTEGER PRIMARY KEY,  -- the live log holds no position at or below it
    first       INTEGER NOT NULL,     -- the segment's positions
    last        INTEGER NOT NULL,     -- the checkpoint's size
    segment     TEXT    NOT NULL,     -- its file name, in the segments folder
    root        BLOB    NOT NULL,     -- the checkpoint's tree head
    archived_at TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS archived_commands (
    command_id     TEXT    PRIMARY KEY,
    stream_id      TEXT    NOT NULL,
    first_position INTEGER NOT NULL,
    last_position  INTEGER NOT NULL,
    first_version  INTEGER NOT NULL,
    last_version   INTEGER NOT NULL,
    last_state     TEXT    NOT NULL
) WITHOUT ROWID;
"""
ARCHIVE_TABLES = ("archive_cuts", "archived_commands")
_REFUSE_DELETE = (
    "CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events"
    " BEGIN SELECT RAISE(ABORT, 'foldline: events is append-only'); END;"
)


@dataclass(frozen=True)
class Cut:
    cut: int
    first: int
    last: int
    segment: str
    root: bytes


@dataclass
class ArchiveReport:
    db: str
    segment: str
    first: int
    last: int
    cut: int
    commands: int
    bytes_before: int
    bytes_after: int
    segment_bytes: int
    seconds: dict[str, float] = field(default_factory=dict)


def segments_folder(db: str | os.PathLike[str]) -> Path:
    """Where a log's segments live: ``<log>.segments`` beside it."""
    return Path(os.path.abspath(os.fspath(db)) + ".segments")


def file_bytes(db: str | os.PathLike[str]) -> int:
    """The log's bytes on disk: the file and its WAL."""
    text = os.fspath(db)
    return sum(os.path.getsize(p) for p in (text, text + "-wal") if os.path.exists(p))


def cuts(reader: Reader) -> list[Cut]:
    """The log's cuts, oldest first (none: nothing archived)."""
    tables = {r[0] for r in reader.query("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    if "archive_cuts" not in tables:
        return []
    rows = reader.query("SELECT cut, first, last, segment, root FROM archive_cuts ORDER BY cut")
    return [Cut(int(c), int(f), int(la), str(s), bytes(r)) for c, f, la, s, r in rows]


def load_segments(db: str | os.PathLike[str], found: list[Cut]) -> list[Segment]:
    """Every segment of the log, read and checked in order, each against its tree head.

    Raises:
        InvalidArgument: a segment is missing (moved away: its path is named).
        ChainBroken: a segment is damaged, does not follow the one before, or its tree head is
            not its checkpoint's.
    """
    folder = segments_folder(db)
    segments: list[Segment] = []
    leaves: list[bytes] = []
    previous = chain.GENESIS
    for cut in found:
        path = folder / cut.segment
        if not path.is_file():
            raise InvalidArgument(
                f"{os.fspath(db)}: positions {cut.first}..{cut.last} are archived in {path},"
                " which is not there: put the segment back beside the log"
            )
        segment = read_segment(path)
        header = segment.header
        if (header.first, header.last, header.root) != (cut.first, cut.last, cut.root):
            raise ChainBroken(f"{path}: not the segment the log recorded for its cut {cut.cut}")
        if header.previous != previous:
            raise ChainBroken(f"{path}: does not link to the segment before it")
        leaves += segment.hashes()
        if LogTree(leaves).root() != header.root:
            raise ChainBroken(f"{path}: its tree head is not its checkpoint's")
        previous = leaves[-1]
        segments.append(segment)
    return segments


def archive(
    db: str | os.PathLike[str], checkpoint: TreeHead, checkpoint_text: str
) -> ArchiveReport:
    """Archive the events up to ``checkpoint`` (see the module's list).

    Raises:
        InvalidArgument: a PostgreSQL log, a checkpoint too small (under one block past the
            last cut) or beyond the log.
        ChainBroken: the log's first ``m`` chain hashes do not have the checkpoint's head.
    """
    text = os.fspath(db)
    if parse_target(text).remote:
        raise InvalidArgument(
            "archive works on a SQLite log; on PostgreSQL partition or drop old rows with the"
            " database's own tools (docs/operating.md, 'Archival')"
        )
    if not Path(text).is_file():
        raise NotALog(f"{text}: no such file")
    m = checkpoint.size
    bytes_before = file_bytes(text)
    reader = open_reader(text)
    try:
        earlier = cuts(reader)
        done = earlier[-1].last if earlier else 0
        cut = m - m % BLOCK
        if m > reader.head():
            raise InvalidArgument(f"the checkpoint holds {m} events, the log {reader.head()}")
        if cut <= (earlier[-1].cut if earlier else 0) or m <= done:
            raise InvalidArgument(
                f"nothing to archive before {m}: events are moved a whole block of {BLOCK} at a"
                f" time, and the log is archived up to {done}"
            )
        if open_tree(reader, m).root() != checkpoint.root:
            raise ChainBroken(f"{text}: its first {m} events do not have the checkpoint's head")
        rows = [
            tuple(r)
            for r in reader.query(
                f"SELECT {COLUMNS} FROM events WHERE position > ? AND position <= ?"
                " ORDER BY position",
                (done, m),
            )
        ]
        before = load_segments(text, earlier)  # checked, and the hash the new one links from
        previous = before[-1].hashes()[-1] if before else chain.GENESIS
        outcomes = reader.query(
            "SELECT c.command_id, c.stream_id, c.first_position, c.last_position, f.version,"
            " l.version, l.state FROM commands c JOIN events f ON f.position = c.first_position"
            " JOIN events l ON l.position = c.last_position WHERE c.first_position <= ?",
            (cut,),
        )
    finally:
        reader.close()
    folder = segments_folder(text)
    make_dirs(folder)
    path = write_segment(folder, rows, previous, checkpoint.root, checkpoint_text)
    load_segments(text, [*earlier, Cut(cut, done + 1, m, Path(path).name, checkpoint.root)])
    storage = open_storage(text)
    try:
        writer = storage.writer()
        writer.begin()
        try:
            cursor = writer.cursor
            # The nodes over every whole block first: they are the frontier the proofs need.
            rows_of = lambda sql, params: cursor.execute(sql, params).fetchall()  # noqa: E731
            head = int(cursor.execute("SELECT max(position) FROM events").fetchall()[0][0])
            cursor.executemany(INSERT_NODES, nodes_to_add(rows_of, head, text))
            cursor.execute(CUTS_DDL)
            cursor.executemany(
                "INSERT OR IGNORE INTO archived_commands VALUES (?, ?, ?, ?, ?, ?, ?)",
                [tuple(r) for r in outcomes],
            )
            cursor.execute(
                "INSERT INTO archive_cuts VALUES (?, ?, ?, ?, ?, ?)",
                (
                    cut,
                    done + 1,
                    m,
                    Path(path).name,
                    checkpoint.root,
                    format_time(SystemClock().now()),
                ),
            )
            cursor.execute("DROP TRIGGER events_refuse_delete")
            cursor.execute("DELETE FROM events WHERE position <= ?", (cut,))
            cursor.execute(_REFUSE_DELETE)
            writer.commit()
        except BaseException:
            writer.rollback()
            raise
        writer.cursor.execute("VACUUM")
        writer.cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        storage.close()
    return ArchiveReport(
        text, path, done + 1, m, cut, len(outcomes), bytes_before, file_bytes(text),
        os.path.getsize(path),
    )  # fmt: skip


def inclusion(db: str | os.PathLike[str], position: int, size: int | None) -> dict[str, Any]:
    """The inclusion proof of ``position`` in the tree of ``size`` (default: the head), made
    from the segments' chain hashes and the live log's after them: the JSON of ``foldline
    prove inclusion``, with the segment that holds the position.

    Raises:
        InvalidArgument: ``size`` or ``position`` out of range, a segment missing.
        ChainBroken: a segment does not check.
    """
    with contextlib.closing(open_reader(db)) as reader:
        found = cuts(reader)
        head = reader.head()
        size = head if size is None else size
        if not 1 <= size <= head:
            raise InvalidArgument(f"--size {size}: the log holds {head} events")
        if not 1 <= position <= size:
            raise InvalidArgument(f"position {position}: not in a tree of {size} events")
        segments = load_segments(db, found)
        leaves = [h for segment in segments for h in segment.hashes()]
        if size > len(leaves):
            leaves += read_leaves(reader, len(leaves), size)
    tree = LogTree(leaves[:size])
    index = position - 1
    holder = next(s for s in segments if s.header.first <= position <= s.header.last)
    return {
        "size": size,
        "root": b64(tree.root()),
        "position": position,
        "leaf_index": index,
        "chain_hash": b64(leaves[index]),
        "leaf_hash": b64(tree.leaf_hash(index)),
        "proof": [b64(node) for node in tree.inclusion(index, size)],
        "segment": os.path.basename(holder.path),
    }


def is_archived(db: str | os.PathLike[str], position: int) -> bool:
    """Whether ``position`` lies at or below the log's last cut (a segment holds it)."""
    with contextlib.closing(open_reader(db)) as reader:
        found = cuts(reader)
    return bool(found) and position <= found[-1].cut


@contextlib.contextmanager
def joined(db: str | os.PathLike[str]) -> Iterator[str]:
    """The path of a whole log: ``db`` itself when nothing is archived, else a temporary copy
    with its segments' events written back (checked against the live rows they overlap) and
    the archive's own tables dropped. Removed afterwards.

    Raises:
        InvalidArgument, ChainBroken: as ``load_segments``; ChainBroken too when a live row of
            the overlap differs from the segment's.
    """
    text = os.fspath(db)
    with contextlib.closing(open_reader(text)) as reader:
        found = cuts(reader)
    if not found:
        yield text
        return
    segments = load_segments(text, found)
    with tempfile.TemporaryDirectory(prefix="foldline-joined-") as folder:
        whole = os.path.join(folder, "whole.db")
        with contextlib.closing(open_reader(text)) as reader:
            reader.query("VACUUM INTO ?", (whole,))
        write_back(whole, segments)
        yield whole


def write_back(whole: str, segments: list[Segment]) -> None:
    """Insert the segments' rows into the copy ``whole`` and drop the archive's tables."""
    storage = open_storage(whole)
    try:
        writer = storage.writer()
        writer.begin()
        try:
            cursor = writer.cursor
            for segment in segments:
                for row in segment.rows:
                    live = cursor.execute(
                        f"SELECT {COLUMNS} FROM events WHERE position = ?", (row[0],)
                    ).fetchall()
                    if live and tuple(live[0]) != tuple(row):
                        raise ChainBroken(
                            f"position {row[0]}: the live row differs from {segment.path}'s"
                        )
                    if not live:
                        cursor.execute(
                            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row
                        )
            for table in ARCHIVE_TABLES:
                cursor.execute(f"DROP TABLE {table}")
            writer.commit()
        except BaseException:
            writer.rollback()
            raise
    finally:
        storage.close()


def join_into(db: str | os.PathLike[str], target: str | os.PathLike[str]) -> int:
    """Write the live log and its segments into the new whole log ``target``; its head.

    Raises:
        InvalidArgument: ``target`` exists; as ``joined``.
    """
    if Path(target).exists():
        raise InvalidArgument(f"{os.fspath(target)}: exists; the whole log is written anew")
    with joined(db) as whole, contextlib.closing(open_reader(whole)) as reader:
        reader.query("VACUUM INTO ?", (os.path.abspath(os.fspath(target)),))
        return reader.head()
