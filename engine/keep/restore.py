"""``foldline restore REPLICA LOG [--to-position N | --to-time T]``: a working log from a replica.

The new log holds the replica's events ``1..N`` as stored (positions, hashes, epochs, payload
bytes: the chain is the source's), the commands whose events all lie there, and the stored tree
nodes that cover only those events. Its read models are folded by the caller (opening it with
the machines and projections, ``engine.log.open_log``), so ``foldline verify`` judges it as it
judges any log.

Before anything is written the replica is checked: its chain over ``1..N``, and its tree head
at the newest of its checkpoints within ``1..N`` against the head it recorded then. ``N`` may
not fall inside one command's append (those events were committed together, and a log that
holds half of them never existed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from engine import chain
from engine.audit.source import COLUMNS, Reader, open_reader
from engine.clock import SystemClock, format_time, parse_time
from engine.errors import ChainBroken, InvalidArgument
from engine.keep.replica import replica_file
from engine.merkle.proofs import b64
from engine.merkle.tree import open_tree
from engine.storage import open_storage

PAGE = 5000


@dataclass(frozen=True)
class Restored:
    replica: str
    log: str
    events: int
    commands: int
    recorded_at: str | None  # of the last event restored
    checked_root: str | None  # the replica checkpoint's head the events were checked against
    checked_size: int


def position_at(replica: Reader, to_position: int | None, to_time: str | None) -> int:
    """The last position to restore: ``to_position``, the last event recorded at or before
    ``to_time``, or the replica's head.

    Raises:
        InvalidArgument: a position beyond the replica, or a time that is not ISO-8601.
    """
    head = replica.head()
    if to_position is not None:
        if not 0 <= to_position <= head:
            raise InvalidArgument(f"--to-position {to_position}: the replica holds {head} events")
        return to_position
    if to_time is not None:
        try:
            moment = format_time(parse_time(to_time))
        except ValueError as ex:
            raise InvalidArgument(f"--to-time {to_time!r}: not an ISO-8601 time") from ex
        found = replica.query(
            "SELECT coalesce(max(position), 0) FROM events WHERE recorded_at <= ?", (moment,)
        )
        return int(found[0][0])
    return head


def _check(replica: Reader, last: int) -> tuple[int, bytes | None]:
    """The replica's chain over 1..last, and its tree head at its newest checkpoint within.

    Raises:
        ChainBroken: either does not hold.
    """
    rows = replica.rows(
        f"SELECT {COLUMNS} FROM events WHERE position <= ? ORDER BY position", (last,)
    )
    broken = next(iter(chain.check_rows(rows, chain.GENESIS, 0)), None)
    if broken is not None:
        raise ChainBroken(f"{replica.path}: position {broken.position}: {broken.detail}")
    tables = {r[0] for r in replica.query("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    if "replica_checkpoints" not in tables:
        return 0, None
    found = replica.query(
        "SELECT size, root FROM replica_checkpoints WHERE size <= ? ORDER BY size DESC LIMIT 1",
        (last,),
    )
    if not found:
        return 0, None
    size, root = int(found[0][0]), bytes(found[0][1])
    if open_tree(replica, size).root() != root:
        raise ChainBroken(f"{replica.path}: its tree of {size} events is not the recorded head")
    return size, root


def restore(
    replica_path: str | os.PathLike[str],
    target: str | os.PathLike[str],
    to_position: int | None = None,
    to_time: str | None = None,
) -> Restored:
    """Write the replica's events up to a position or a time into the new log ``target``.

    Raises:
        InvalidArgument: ``target`` exists, the bound is out of range or splits a command.
        ChainBroken: the replica's chain or tree does not verify.
        NotALog: the replica is not a foldline log.
    """
    source = replica_file(replica_path)
    if Path(target).exists():
        raise InvalidArgument(f"{os.fspath(target)}: exists; restore makes a new log")
    replica = open_reader(source)
    try:
        last = position_at(replica, to_position, to_time)
        split = replica.query(
            "SELECT command_id, first_position, last_position FROM commands"
            " WHERE first_position <= ? AND last_position > ? LIMIT 1",
            (last, last),
        )
        if split:
            command, first, end = split[0]
            raise InvalidArgument(
                f"position {last} falls inside command {command!r}'s append ({first}..{end}):"
                f" restore to {first - 1} or {end}"
            )
        checked_size, root = _check(replica, last)
        commands = [
            tuple(r)
            for r in replica.query(
                "SELECT command_id, stream_id, first_position, last_position FROM commands"
                " WHERE last_position <= ?",
                (last,),
            )
        ]
        nodes = [
            tuple(r)
            for r in replica.query(
                "SELECT level, idx, hash FROM tree_nodes WHERE ((idx + 1) << level) <= ?", (last,)
            )
        ]
        recorded = replica.query("SELECT recorded_at FROM events WHERE position = ?", (last,))
        storage = open_storage(os.fspath(target), sync="full")
        written = False
        try:
            storage.migrate(format_time(SystemClock().now()))
            writer = storage.writer()
            writer.begin()
            try:
                after = 0
                while after < last:
                    rows = [
                        tuple(r)
                        for r in replica.query(
                            f"SELECT {COLUMNS} FROM events WHERE position > ? AND position <= ?"
                            " ORDER BY position LIMIT ?",
                            (after, last, PAGE),
                        )
                    ]
                    writer.insert_events(rows)
                    after = rows[-1][0]
                writer.insert_commands(commands)
                writer.cursor.executemany(
                    "INSERT INTO tree_nodes (level, idx, hash) VALUES (?, ?, ?)", nodes
                )
                writer.commit()
                written = True
            except BaseException:
                writer.rollback()
                raise
        finally:
            storage.close()
            if not written:  # nothing half made is left for a retry to trip over
                for leftover in (f"{os.fspath(target)}{end}" for end in ("", "-wal", "-shm")):
                    Path(leftover).unlink(missing_ok=True)
    finally:
        replica.close()
    return Restored(
        source,
        os.fspath(target),
        last,
        len(commands),
        recorded[0][0] if recorded else None,
        b64(root) if root is not None else None,
        checked_size,
    )
