"""``verify`` on both cores: one scan per share of the streams, a fast pass, exact rechecks.

Legality needs every event of a stream in order, and a read model's row is folded from its own
stream's events, so the work splits by stream: each worker scans its share of the streams once
and, per row, checks the row's chain link from the hash stored at the position before it (every
row carries the previous hash, so no other row is needed), replays it through its machine, and
folds it into memory (``Projection.memory_folder``: the domain read models fold into Python
lists). It then compares that fold with its share of the stored tables, in the read
transaction of its scan (``engine.audit.tables``: rows kept in memory row by row as they are,
a fold written to a scratch database joined by SQLite). Every refolded row stored as it is,
and as many stored rows as refolded ones over all shares, means the tables equal the fold.

That pass can only prove a log right. Whatever it doubts is checked again the exact way, which
words the findings as before: a link that does not check, or positions that are not exactly
1..n, run the sequential chain check by position ranges (a range starts from the hash stored
before it, as the sequential check trusts a stored hash again after a broken link); a memory
fold that refuses an event reruns that share through the projections' SQL handlers; and a
projection that disagrees (a fold across streams, a wrong memory fold, a write meanwhile, or a
tampered table) is refolded once more in one piece, in one snapshot, through the SQL handlers,
before it is reported.

Nothing is written to the input and nothing is copied, unless the file has an older schema that
must be migrated first (then a private copy is).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import msgspec

from engine import chain
from engine.audit import tables
from engine.audit.source import Reader, copy_log, open_reader, ranges
from engine.audit.tables import share_of
from engine.chain import Violation
from engine.errors import EngineError, InvalidTransition, UnknownStreamKind
from engine.events import RecordedEvent
from engine.log import open_log
from engine.machines import STREAM_ID_PATTERN, Machines, MachineSpec, stream_head
from engine.projection import Folder, Projection, ProjectionSet
from engine.storage.sqlite.schema import LATEST
from engine.streams import StreamsProjection

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``, called now and then during long audits."""

PARALLEL_FROM = 20_000  # below this many events, one process is faster than starting workers
EVENTS_PER_SHARE = 2_000_000
MAX_POSITION = (1 << 63) - 1
MMAP_BYTES = 1 << 34  # address space only: pages come from the OS cache
CACHE_KIB = 256 * 1024


@dataclass
class Report:
    events: int
    violations: list[Violation]
    # Projections that were not compared, and why (a version the code does not fold, a
    # checkpoint behind the log, a read model in the file that no declaration names).
    unchecked: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class _Part:
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
_CONTEXT: dict[str, Any] = {}


def _check_chain(path: str, lo: int, hi: int) -> list[Violation]:
    reader = open_reader(path)
    try:
        before = reader.query(
            "SELECT position, hash FROM events WHERE position < ? ORDER BY position DESC LIMIT 1",
            (lo,),
        )
        after, previous = before[0] if before else (0, chain.GENESIS)
        rows = reader.rows(
            "SELECT position, stream_id, version, event_type, recorded_at, epoch, command_id,"
            " state, payload, hash FROM events WHERE position BETWEEN ? AND ? ORDER BY position",
            (lo if lo > 1 else -MAX_POSITION, hi),  # the first range also sees rows before 1
        )
        return list(chain.check_rows(rows, bytes(previous), after))
    finally:
        reader.close()


def _replay(path: str, part: int, parts: int, fold: Sequence[str], fast: bool = True) -> _Part:
    """Replay one share of the streams through the machines, folding ``fold`` projections.

    ``fast``: fold through each projection's ``memory_folder`` and check each row's chain link
    from the hash stored at the position before it, in the same scan (a faster pass that can
    only prove a log right: whatever it doubts, ``verify`` checks again the exact way).
    Otherwise fold through ``folder``, which is how the tables were written.
    """
    # The fold keeps a million small objects alive and frees none of them, the worst case
    # for the cycle collector: it would walk them all again and again (half the time, measured).
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            return _replay_share(path, part, parts, fold, fast)
        except _Doubt:
            return _replay_share(path, part, parts, fold, False)
    finally:
        if collecting:
            gc.enable()


class _Doubt(Exception):
    """The fast pass cannot tell: a memory fold refused an event."""


def _replay_share(path: str, part: int, parts: int, fold: Sequence[str], fast: bool) -> _Part:
    machines: Machines = _CONTEXT["machines"]
    projections = [p for p in _CONTEXT["projections"] if p.name in fold]
    found = _Part(fast=fast)
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
            + f" WHERE {share_of('e.stream_id', parts)} ORDER BY e.position",
            (part, chain.GENESIS) if fast else (part,) if parts > 1 else (),
        )
        if fast:  # in the snapshot of the scan
            found.counts = tuple(
                reader.query("SELECT count(*), min(position), max(position) FROM events")[0]
            )
        # The typed decoders straight, as `codec.decode` calls them; any failure goes through
        # `codec.decode` again, which words it.
        decoders = {tag: d.decode for tag, d in codec._decoders.items()}
        head_of = heads.get
        well_formed = STREAM_ID_PATTERN.match
        for (
            position,
            stream_id,
            version,
            event_type,
            recorded_at,
            epoch,
            command_id,
            state,
            payload,
            digest,
            _,
        ) in _checked(rows, found) if fast else rows:
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
            if machine is None:
                seen_kind = found.undeclared.setdefault(stream_id.partition(":")[0], [position, 0])
                seen_kind[1] += 1
            else:
                try:
                    try:
                        event = decoders[event_type](payload)
                    except (KeyError, msgspec.DecodeError):
                        event = codec.decode(event_type, payload)
                    expected = unguarded.get((last_state, event_type), _GUARDED)
                    if expected is _GUARDED:  # guards to run, or a refusal to word
                        expected = machine.next_state(
                            stream_head(stream_id, last_version, last_state), event, event_type
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
            recorded = RecordedEvent.from_row(
                (
                    position,
                    stream_id,
                    version,
                    event_type,
                    recorded_at,
                    epoch,
                    command_id,
                    state,
                    payload,
                    digest,
                ),
                event,
            )
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


CHUNK = 4096  # rows whose links are checked in one go


def _checked(rows: Iterator[Any], found: _Part) -> Iterator[Any]:
    """``rows`` in chunks, each chunk's links checked before its rows are handed on, and
    counted in ``found``."""
    while chunk := list(islice(rows, CHUNK)):
        found.rows += len(chunk)
        if not found.chain_doubted and not chain.links_hold(chunk):
            found.chain_doubted = True
        yield from chunk


def _route(folder: Folder, event_type: str) -> Callable[[RecordedEvent, str], None]:
    """What folds an event of this type into ``folder``: its own route when it has one."""
    route = folder.routes.get(event_type) if folder.routes is not None else None
    return route if route is not None else _routed(folder.feed)


def _routed(feed: Callable[[RecordedEvent], None]) -> Callable[[RecordedEvent, str], None]:
    return lambda event, _entity: feed(event)


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
        lambda: cursor.executemany(StreamsProjection.upsert_sql, list(rows.values())),
        frozenset(),
        lambda: {"streams": rows},
    )


def _which_projections(
    reader: Reader, projections: ProjectionSet
) -> tuple[list[str], dict[str, str]]:
    stored = {
        name: (version, checkpoint)
        for name, version, checkpoint in reader.query(
            "SELECT name, version, checkpoint FROM projections"
        )
    }
    checked, unchecked = [], {}
    for projection in projections.projections:
        version, checkpoint = stored.get(projection.name, (None, None))
        if version is None:
            continue  # the file does not keep it: nothing to compare
        if version != projection.version:
            unchecked[projection.name] = (
                f"stored version {version}, this code folds {projection.version}"
            )
        elif checkpoint is not None:
            unchecked[projection.name] = f"behind the log (checkpoint {checkpoint})"
        else:
            checked.append(projection.name)
    for name in sorted(stored.keys() - projections.names):
        unchecked[name] = "kept in the file, but not declared (pass --machines)"
    return checked, unchecked


def _pool(workers: int) -> ProcessPoolExecutor | None:
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))


def verify(
    path: str | os.PathLike[str],
    machines: Sequence[MachineSpec],
    projections: Sequence[Projection],
    progress: Progress | None = None,
    workers: int | None = None,
) -> Report:
    """Every check of SPEC §10 ``verify``: the hash chain and gap-free positions, contiguous
    versions per stream, every event legal when replayed through the declared machines (a
    stream kind with no declaration is one finding), and every projection equal to a fresh
    fold. Each violation names a position and a kind.

    Raises:
        NotALog, SchemaTooNew, StorageError: the file cannot be audited.
    """
    reader = open_reader(path)
    try:
        if reader.schema < LATEST:
            return _verify_migrated_copy(reader, machines, projections, progress, workers)
        head = reader.head()
        projection_set = ProjectionSet([StreamsProjection(), *projections])
        fold, unchecked = _which_projections(reader, projection_set)
    finally:
        reader.close()
    _CONTEXT.update(machines=Machines(machines), projections=projection_set.projections)
    text = os.fspath(path)
    count = workers or (min(2, os.cpu_count() or 1) if head >= PARALLEL_FROM else 1)
    pool = _pool(count)
    # Each share of the streams is refolded in memory (and copied once to be compared):
    # enough shares that none holds much more than two million events.
    shares = max(count, -(-head // EVENTS_PER_SHARE))
    # A read model that folds across entities is only compared with a refold in one piece
    # (`_compare_projections`): the shares need not fold it.
    by_share = fold if shares == 1 else [name for name in fold if name in _by_entity()]
    try:
        if pool is None:
            parts = [_replay(text, part, shares, by_share) for part in range(shares)]
        else:
            replays: list[Future[_Part]] = [
                pool.submit(_replay, text, part, shares, by_share) for part in range(shares)
            ]
            parts = [future.result() for future in replays]
        chains: list[list[Violation]] = []
        if not _links_hold(parts):  # the exact check, by segments: it says what is wrong
            segments = ranges(head, count) or [(1, 0)]
            if pool is None:
                chains = [_check_chain(text, lo, hi) for lo, hi in segments]
            else:
                futures = [pool.submit(_check_chain, text, lo, hi) for lo, hi in segments]
                chains = [future.result() for future in futures]
        if progress:
            progress("chain", head, head)
    finally:
        if pool is not None:
            pool.shutdown()
    if progress:
        progress("projections", head, head)
    violations = [v for found in chains for v in found]
    violations += [v for part in parts for v in part.violations]
    undeclared: dict[str, list[int]] = {}
    for part in parts:
        for kind, (first, n) in part.undeclared.items():
            seen = undeclared.setdefault(kind, [first, 0])
            seen[0], seen[1] = min(seen[0], first), seen[1] + n
    violations += [
        Violation(
            first,
            "undeclared_kind",
            f"{n} events of {kind!r} streams not replayed: no machine is declared for kind"
            f" {kind!r} (pass --machines MODULE:ATTRIBUTE)",
        )
        for kind, (first, n) in sorted(undeclared.items())
    ]
    violations += _compare_projections(text, fold, parts, head)
    violations.sort(key=lambda v: (v.position, v.kind))
    return Report(head, violations, unchecked)


def _links_hold(parts: Sequence[_Part]) -> bool:
    """The fast passes checked every row's link from the hash stored at the position before
    it, and the positions run 1..n without a gap: what the sequential chain check proves."""
    counts = {part.counts for part in parts}
    if len(counts) != 1 or not all(part.fast and not part.chain_doubted for part in parts):
        return False  # a doubtful link, or the shares saw different snapshots of a live log
    rows, lowest, highest = counts.pop()
    return sum(part.rows for part in parts) == rows == (highest or 0) and lowest in (1, None)


def _agrees(parts: Sequence[_Part], name: str) -> bool:
    """Every refolded row is stored as it is, and there are as many rows as refolded: the
    stored tables are exactly the fold (when every part saw the same log)."""
    differing = sum(p.compared[name][0] for p in parts)
    folded = sum(p.compared[name][1] for p in parts)
    stored = {p.compared[name][2] for p in parts}
    return differing == 0 and stored == {folded}


def _by_entity() -> set[str]:
    """The projections whose rows each fold from their own entity's streams only."""
    return {
        p.name
        for p in _CONTEXT["projections"]
        if p.folds_by_entity or isinstance(p, StreamsProjection)
    }


def _compare_projections(
    path: str, fold: Sequence[str], parts: Sequence[_Part], head: int
) -> list[Violation]:
    if any(p.unfoldable for p in parts):  # said where, by the part that could not
        return []
    split = len(parts) > 1
    # Shares that each agree prove nothing for a read model that folds across entities (its
    # rows may depend on events of another share), so the shares do not fold it at all.
    suspects = [
        name for name in fold if (split and name not in _by_entity()) or not _agrees(parts, name)
    ]
    if suspects and (split or parts[0].fast):
        # A fold across streams, a write meanwhile, or a memory fold that is wrong? Once more
        # in one piece, in one snapshot, through the folds that wrote the tables.
        whole = _replay(path, 0, 1, suspects, fast=False)
        suspects = [name for name in suspects if not _agrees([whole], name)]
    return [
        Violation(head, "projection_mismatch", f"projection {name} differs from a fold")
        for name in suspects
    ]


def _verify_migrated_copy(
    reader: Reader,
    machines: Sequence[MachineSpec],
    projections: Sequence[Projection],
    progress: Progress | None,
    workers: int | None,
) -> Report:
    """An older schema: migrate a private copy, verify that."""
    folder = Path(tempfile.mkdtemp(prefix="foldline-audit-"))
    try:
        copy = folder / "audit.db"
        copy_log(reader, copy)
        open_log(copy, machines, projections, sync="normal").close()
        return verify(copy, machines, projections, progress, workers)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
