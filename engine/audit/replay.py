"""One share of the streams, replayed and refolded in one scan (the fast pass of ``verify``,
or its exact recheck through the SQL handlers).

A worker scans its share once and, per row, checks the row's chain link from the hash stored
at the position before it, replays it through its machine, and folds it into memory
(``Projection.memory_folder``). It then compares that fold with its share of the stored tables
in the read transaction of its scan (``engine.audit.tables``). What it found goes back to
``verify`` as a ``Part``; a memory fold that refuses an event reruns the share the exact way.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain as chained
from itertools import islice
from typing import Any

import msgspec

from engine import chain
from engine.audit import tables
from engine.audit.source import open_reader
from engine.audit.tables import share_of
from engine.chain import Violation
from engine.errors import (
    EngineError,
    InvalidEvent,
    InvalidTransition,
    MissingGuard,
    UnknownEventType,
    UnknownStreamKind,
)
from engine.events import EventCodec, RecordedEvent
from engine.log import open_log
from engine.machines import STREAM_ID_PATTERN, Machines, StreamHead
from engine.projection import Folder, Projection
from engine.storage.streams_table import UPSERT_SQL
from engine.streams import StreamsProjection

MAX_POSITION = (1 << 63) - 1
MMAP_BYTES = 1 << 34  # address space only: pages come from the OS cache
CACHE_KIB = 256 * 1024


@dataclass
class Part:
    """What one replay worker found in its share of the streams."""

    violations: list[Violation] = field(default_factory=list)
    undeclared: dict[str, list[int]] = field(default_factory=dict)  # kind -> [first, count]
    # projection -> (rows of the refold not found as they are in the stored tables,
    #                rows of the refold, rows of the stored tables), per table summed
    compared: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    unfoldable: bool = False  # an event of a declared kind did not decode
    fast: bool = False  # folded in memory, and the chain links checked on the way
    rows: int = 0  # rows whose links the fast pass checked
    chain_doubted: bool = False  # some link did not check: the exact chain check words it
    counts: tuple[int, int | None, int | None] = (0, None, None)  # rows, first, last position


# Set before the workers fork, read by them: machines and projections are objects (user
# declarations among them), not something to pickle.
CONTEXT: dict[str, Any] = {}


def replay(
    path: str,
    part: int,
    parts: int,
    fold: Sequence[str],
    fast: bool = True,
    only: Sequence[str] | None = None,
) -> Part:
    """Replay one share of the streams through the machines, folding ``fold`` projections.

    ``fast``: fold through each projection's ``memory_folder`` and check each row's chain link
    from the hash stored at the position before it, in the same scan (a faster pass that can
    only prove a log right: whatever it doubts, ``verify`` checks again the exact way).
    Otherwise fold through ``folder``, which is how the tables were written.

    ``only``: replay just these streams (every event of each), and compare the refold with the
    stored rows they own (``tables.compare_owned``) rather than with whole tables: what
    ``verify --since`` checks of the entities a log's tail touches.
    """
    # The fold keeps a million small objects alive and frees none of them, the worst case
    # for the cycle collector: it would walk them all again and again (half the time, measured).
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            return _replay_share(path, part, parts, fold, only, fast)
        except _Doubt:
            return _replay_share(path, part, parts, fold, only, False)
    finally:
        if collecting:
            gc.enable()


class _Doubt(Exception):
    """The fast pass cannot tell: a memory fold refused an event."""


def _replay_share(
    path: str, part: int, parts: int, fold: Sequence[str], only: Sequence[str] | None, fast: bool
) -> Part:
    machines: Machines = CONTEXT["machines"]
    projections = [p for p in CONTEXT["projections"] if p.name in fold]
    found = Part(fast=fast)
    reader = open_reader(path)
    reader.query("ATTACH DATABASE 'file:fold?mode=memory' AS fold")
    # Pages read through a memory map rather than one read() each, with a cache large enough
    # for the stored read models the comparison reads.
    reader.query(f"PRAGMA main.mmap_size = {MMAP_BYTES}")
    reader.query(f"PRAGMA main.cache_size = -{CACHE_KIB}")
    # One read transaction for the scan and the comparison: on a live log the stored tables
    # must be those of the very events replayed.
    connection = reader.log.connection()
    connection.execute("BEGIN")
    scratch = open_log(  # the log adds its own `streams`
        ":memory:",
        machines,
        [p for p in projections if not isinstance(p, StreamsProjection)],
        sync="normal",
    )
    try:
        cursor = scratch.connection().cursor()
        # Secondary indexes speed up readers, not folds (which write by primary key), and
        # change no row: without them each write touches one B-tree instead of up to nine.
        for (index,) in cursor.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL"
        ).fetchall():
            cursor.execute(f'DROP INDEX "{index}"')
        cursor.execute("BEGIN")
        # The scratch log holds no events: `streams` folds the replayed ones in memory instead
        # of recomputing its heads from an events table (its own bulk fold does that). The
        # fast pass folds the very rows it replays with (see `heads`).
        heads_rows: dict[str, list[Any]] = {}
        folders = [
            (
                p,
                (_heads_folder(cursor, heads_rows) if fast else p.replay_folder(cursor))
                if isinstance(p, StreamsProjection)
                else (p.memory_folder(cursor) if fast else p.folder(cursor)),
            )
            for p in projections
        ]
        envelope_only = [
            _routed(f.feed) for p, f in folders if isinstance(p, StreamsProjection) and not fast
        ]
        routes: dict[str, list[Callable[[RecordedEvent, str], None]]] = {}
        codec = scratch.codec
        # stream id -> (machine, its unguarded transitions, the stream's `streams` row, which
        # holds the last version and state as `StreamsProjection.apply` leaves it, the id
        # part of the stream id that the folds are given)
        heads: dict[str, tuple[Any, Any, list[Any], str]] = {}
        # kind -> (machine or None, its unguarded transitions), for well-formed stream ids
        kinds: dict[str, tuple[Any, dict[Any, Any]]] = {}
        # The fast pass also reads the hash stored just before each row, to check its link.
        # The first row's previous hash is the genesis value; a row after a gap has none.
        rows = reader.rows(
            "SELECT e.position, e.stream_id, e.version, e.event_type, e.recorded_at, e.epoch,"
            " e.command_id, e.state, e.payload, e.hash, "
            + (
                "coalesce(p.hash, CASE WHEN e.position = 1 THEN ?2 END)"
                " FROM events e LEFT JOIN events p ON p.position = e.position - 1"
                if fast
                else "NULL FROM events e"
            )
            + f" WHERE {_which_rows(parts, only)} ORDER BY e.position",
            _row_params(part, parts, fast, only),
        )
        if fast and only is None:  # in the snapshot of the scan (a few streams: no use for it)
            found.counts = tuple(
                reader.query("SELECT count(*), min(position), max(position) FROM events")[0]
            )
        # The typed decoders straight, as `codec.decode` calls them; any failure goes through
        # `codec.decode` again, which words it.
        decoders = codec.plain_decoders()
        head_of = heads.get
        well_formed = STREAM_ID_PATTERN.match
        envelope = RecordedEvent.from_row
        # The declarations in force (ADR 0060): the code's until the first recorded ones,
        # then each recorded one for the events after it.
        eras: list[tuple[int, Machines]] = CONTEXT.get("eras", [])
        era, switch_at = 0, eras[0][0] if eras else MAX_POSITION
        for row in chained.from_iterable(_checked(rows, found)) if fast else rows:
            position, stream_id, version, event_type, recorded_at, _, _, state, payload, _, _ = row
            if position > switch_at:
                while era < len(eras) and eras[era][0] < position:
                    machines = eras[era][1]
                    era += 1
                switch_at = eras[era][0] if era < len(eras) else MAX_POSITION
                kinds.clear()
                for known_id, (_, _, known_row, known_entity) in list(heads.items()):
                    heads[known_id] = (*_declared(machines, known_id), known_row, known_entity)
            known = head_of(stream_id)
            if known is None:
                kind, _, entity = stream_id.partition(":")
                formed = well_formed(stream_id)
                declared = kinds.get(kind) if formed else None
                if declared is None:
                    declared = _declared(machines, stream_id)
                    if formed:
                        kinds[kind] = declared
                # version 0 and no state yet: moved on below, as for every event
                opened = [stream_id, kind, 0, None, position, position, recorded_at, recorded_at]
                heads_rows[stream_id] = opened
                known = heads[stream_id] = (*declared, opened, entity)
            machine, unguarded, head, entity = known
            last_version, last_state = head[2], head[3]
            head[2], head[3], head[5], head[7] = version, state, position, recorded_at
            if version != last_version + 1:
                found.violations.append(
                    Violation(
                        position,
                        "version_gap",
                        f"{stream_id}: version {version} after {last_version}",
                    )
                )
            event: Any = None
            judged = folded_as = event_type  # the tag the rules and the folds see
            if machine is None:
                seen_kind = found.undeclared.setdefault(stream_id.partition(":")[0], [position, 0])
                seen_kind[1] += 1
            else:
                try:
                    try:
                        event = decoders[event_type](payload)
                    except (KeyError, msgspec.DecodeError):
                        event = _decode(codec, machine, event_type, payload)
                        upcast = event.__struct_config__.tag
                        if upcast != event_type:  # a replaced tag (ADR 0061)
                            folded_as = upcast
                            if event_type not in machine.event_classes:
                                judged = upcast  # rules that never knew the old tag
                    expected = unguarded.get((last_state, judged), _GUARDED)
                    if expected is _GUARDED:  # guards to run, or a refusal to word
                        expected = machine.next_state(
                            StreamHead(stream_id, last_version, last_state), event, judged
                        )
                    elif expected is None:  # a transition that keeps the state
                        expected = last_state
                    if expected != state:
                        found.violations.append(
                            Violation(
                                position,
                                "state_mismatch",
                                f"{stream_id}: recorded {state}, machine says {expected}",
                            )
                        )
                except MissingGuard as ex:
                    found.violations.append(Violation(position, "missing_guard", str(ex)))
                except InvalidTransition as ex:
                    found.violations.append(Violation(position, "illegal_transition", str(ex)))
                except EngineError as ex:
                    found.violations.append(Violation(position, "undecodable", str(ex)))
                    if event is None and not found.unfoldable:
                        found.violations.append(
                            Violation(
                                position,
                                "projection_unverifiable",
                                "an event that does not decode stops the read models"
                                " from being refolded",
                            )
                        )
                        found.unfoldable = True
            if found.unfoldable:
                continue
            event_type = folded_as
            if event is None:  # only the envelope is known: only `streams` can fold it
                feeds = envelope_only
            else:
                feeds = routes.get(event_type)  # type: ignore[assignment]
                if feeds is None:
                    feeds = routes[event_type] = [
                        _route(f, event_type)
                        for _, f in folders
                        if f.event_types is None or event_type in f.event_types
                    ]
            if not feeds:
                continue
            recorded = envelope(row, event)
            if event_type != row[3]:  # upcast to another tag: folded as what it became
                recorded = msgspec.structs.replace(recorded, event_type=event_type)
            try:
                for feed in feeds:
                    feed(recorded, entity)
            except Exception as ex:  # a tampered log can break a read model's own rules
                if fast:  # or a memory fold is wrong: the exact fold says which
                    raise _Doubt from ex
                found.violations.append(
                    Violation(position, "projection_unverifiable", f"refolding failed: {ex}")
                )
                found.unfoldable = True
        if found.unfoldable:
            cursor.execute("ROLLBACK")
            connection.execute("COMMIT")
            return found
        if only is not None:  # a few entities: every refold written, compared with their rows
            for _, folder in folders:
                folder.finish()
            cursor.execute("COMMIT")
            owned = {p.name: p.tables for p in projections}
            image = cursor.connection.serialize("main")
            found.compared = tables.compare_owned(connection, image, owned, only)
            connection.execute("COMMIT")
            return found
        # Rows a fold keeps in memory are compared as they are; the other folds write theirs.
        kept = {
            p.name: in_memory
            for p, f in folders
            if f.rows is not None and _comparable(connection, p, in_memory := f.rows())
        }
        for p, folder in folders:
            if p.name not in kept:
                folder.finish()
        cursor.execute("COMMIT")
        found.compared = {
            name: tables.compare_rows(connection, rows_of, part, parts)
            for name, rows_of in kept.items()
        }
        written = {p.name: p.tables for p in projections if p.name not in kept}
        if written:
            image = cursor.connection.serialize("main")
            found.compared.update(tables.compare_image(connection, image, written))
        connection.execute("COMMIT")
        return found
    finally:
        scratch.close()
        reader.close()


def _which_rows(parts: int, only: Sequence[str] | None) -> str:
    """The scan's condition: a share of the streams (``?1``), or the streams listed as a JSON
    array in ``?3``."""
    if only is None:
        return share_of("e.stream_id", parts)
    return "e.stream_id IN (SELECT value FROM json_each(?3))"


def _row_params(part: int, parts: int, fast: bool, only: Sequence[str] | None) -> tuple[Any, ...]:
    """The scan's parameters: as many as the highest ``?N`` its SQL names."""
    if only is not None:
        return (part, chain.GENESIS, json.dumps(list(only)))
    return (part, chain.GENESIS) if fast else (part,) if parts > 1 else ()


CHUNK = 4096  # rows whose links are checked in one go


def _checked(rows: Iterator[Any], found: Part) -> Iterator[list[Any]]:
    """``rows`` in chunks, each chunk's links checked before it is handed on, and counted in
    ``found``. Chunks, not rows: the scan flattens them in C, where a
    generator resumed per row cost tens of nanoseconds a row."""
    while chunk := list(islice(rows, CHUNK)):
        found.rows += len(chunk)
        if not found.chain_doubted and not chain.links_hold(chunk):
            found.chain_doubted = True
        yield chunk


def _route(folder: Folder, event_type: str) -> Callable[[RecordedEvent, str], None]:
    """What folds an event of this type into ``folder``: its own route when it has one."""
    route = folder.routes.get(event_type) if folder.routes is not None else None
    return route if route is not None else _routed(folder.feed)


def _routed(feed: Callable[[RecordedEvent], None]) -> Callable[[RecordedEvent, str], None]:
    return lambda event, _entity: feed(event)


def _decode(codec: EventCodec, machine: Any, event_type: str, payload: bytes) -> Any:
    """A payload the fast decoders did not take: upcast by the codec, or, for a tag the code no
    longer declares but the declarations in force did, as that declaration's class (ADR 0060).

    Raises:
        UnknownEventType, InvalidEvent: as ``EventCodec.decode``.
    """
    try:
        return codec.decode(event_type, payload)
    except UnknownEventType:
        recorded = machine.event_classes.get(event_type)
        if recorded is None:
            raise
        try:
            return msgspec.json.decode(payload, type=recorded)
        except msgspec.DecodeError as ex:
            raise InvalidEvent(f"{event_type}: {ex}", event_type=event_type) from ex


_GUARDED = object()  # no unguarded transition: the machine's own `next_state` decides


def _declared(machines: Machines, stream_id: str) -> tuple[Any, dict[Any, Any]]:
    """A stream's machine (None: no declaration for its kind, or a malformed id) and its
    transitions that need no guard, (state, event type) -> the next state (None: the state is
    kept): replaying those is one dictionary lookup."""
    try:
        machine = machines.for_stream(stream_id)
    except UnknownStreamKind:
        return None, {}
    unguarded = {
        key: rules[0].dest
        for key, rules in machine.table.items()
        if len(rules) == 1 and rules[0].guard is None
    }
    return machine, unguarded


def _comparable(connection: Any, projection: Projection, rows: Mapping[str, Any]) -> bool:
    """Rows kept in memory for every table of the projection, each with a primary key."""
    return set(rows) == set(projection.tables) and all(
        tables.primary_key(connection, table) for table in projection.tables
    )


def _heads_folder(cursor: Any, rows: dict[str, list[Any]]) -> Folder:
    """``streams`` for the fast pass: the scan keeps the heads in ``rows`` as it goes (the
    rows ``StreamsProjection.replay_folder`` would fold), compared as they are."""
    return Folder(
        lambda event: None,
        lambda: cursor.executemany(UPSERT_SQL, list(rows.values())),
        frozenset(),
        lambda: {"streams": rows},
    )
