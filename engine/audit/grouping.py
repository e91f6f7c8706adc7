"""How ``diff`` hands the rows that differ over from SQLite and groups them per stream.

Rows handed to Python one by one cost more than SQLite's compare of them (a million rows are
about a second of tuples and dict updates on this box, with the GIL passed back and forth to
the threads running SQLite). A chunk of positions comes over in one step instead, and Python
groups it in runs of one stream with C-level ``map``, ``itertools.compress`` and slices.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import operator
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engine.audit.source import ranges

MAX_POSITION = (1 << 63) - 1


@dataclass
class Grouped:
    streams: dict[int, dict[str, list[int]]]  # kind -> {stream: [versions]}
    # Streams whose head may differ: a row on one side only, a moved row, or a changed row
    # whose state or event type differs (a different time or payload leaves the head alone).
    heads_may_differ: set[str]


# A chunk of positions comes over in one step as three values: a digit per row (its code), and
# the stream ids and versions as JSON arrays in the same order, so the worker threads' SQL runs
# without the GIL until the whole chunk is compared.
CHUNK = 32_768
WORKERS = min(2, os.cpu_count() or 1)


def _chunk_sql(rows: str) -> str:
    return (
        "SELECT count(*), group_concat(code, ''), json_group_array(stream_id),"
        " json_group_array(version), sum(typeof(stream_id) != 'text' OR typeof(version) !="
        f" 'integer') FROM ({rows})"
    )


@dataclass
class _Chunk:
    codes: str  # per row, "0".."5": kind * 2, plus 1 when a head field may differ
    stream_ids: list[Any]
    versions: list[Any]


def _read_chunk(connect: Callable[[], Any], rows: str, prefix: int, lo: int, hi: int) -> _Chunk:
    """One position range of ``rows``, in three values (see ``CHUNK``)."""
    conn = connect()
    count, codes, stream_ids, versions, odd = conn.execute(
        _chunk_sql(rows), (prefix, lo, hi)
    ).fetchall()[0]
    # JSON keeps text and integers exactly; a tampered row holding anything else (a BLOB,
    # which SQLite's JSON functions would read as JSONB, a real, a NULL) is read row by row.
    if not odd:
        chunk = _Chunk(codes or "", json.loads(stream_ids), json.loads(versions))
        if count == len(chunk.codes) == len(chunk.stream_ids) == len(chunk.versions):
            return chunk
    found = conn.execute(rows, (prefix, lo, hi)).fetchall()  # row by row: always right
    return _Chunk(
        "".join(str(row[0]) for row in found),
        [row[1] for row in found],
        [row[2] for row in found],
    )


def _group_chunk(
    chunk: _Chunk,
    found: dict[int, _Runs],
    disordered: set[tuple[int, str]],
    suspects: set[str],
) -> None:
    """Add a chunk's rows to ``found``, per kind, as runs in position order.

    Rows come in position order and one stream's rows often follow each other, so the rows are
    cut into runs (a run ends where the stream or the code changes), each a slice; the cuts and
    slices are C-level ``map`` and ``compress`` (a Python loop costs microseconds per run here).
    A version lower than the one before it in its run (a swap) marks that stream for sorting."""
    codes, stream_ids, versions = chunk.codes, chunk.stream_ids, chunk.versions
    n = len(codes)
    if not n:
        return
    following = itertools.islice(stream_ids, 1, None)
    breaks = list(map(operator.ne, following, stream_ids))  # breaks[i]: a run starts at i + 1
    uniform = codes.count(codes[0]) == n  # the common case: every row of one kind
    if not uniform:
        breaks = list(map(operator.or_, breaks, map(operator.ne, codes[1:], codes)))
    starts = [0, *itertools.compress(range(1, n), breaks)]
    run_ids = list(map(stream_ids.__getitem__, starts))
    runs = list(map(versions.__getitem__, map(slice, starts, [*starts[1:], n])))
    if uniform:
        if codes[0] in HEAD_FIELDS_DIFFER:
            suspects.update(run_ids)
        found[int(codes[0]) >> 1].add(run_ids, runs, int(codes[0]) >> 1, disordered)
    else:
        run_codes = "".join(map(codes.__getitem__, starts))
        suspects.update(
            itertools.compress(run_ids, map(HEAD_FIELDS_DIFFER.__contains__, run_codes))
        )
        for kind in sorted({int(code) >> 1 for code in set(run_codes)}):
            taken = list(map(KIND_CODES[kind].__contains__, run_codes))
            ids = list(itertools.compress(run_ids, taken))
            found[kind].add(ids, list(itertools.compress(runs, taken)), kind, disordered)
    # Within a run: a version lower than the one before it (where no run starts).
    following = itertools.islice(versions, 1, None)
    try:
        falls = list(map(operator.gt, map(operator.lt, following, versions), breaks))
    except TypeError:  # versions of other types (tampered rows): compare within runs only
        falls = [
            not cut and _lower(version, before)
            for version, before, cut in zip(versions[1:], versions, breaks, strict=False)
        ]
    for i in itertools.compress(range(1, n), falls):
        disordered.add((int(codes[i]) >> 1, stream_ids[i]))


def _lower(value: Any, before: Any) -> bool:
    """``value < before``; values of types that do not compare (a tampered row) count as out
    of order, so their stream is sorted by ``in_order``."""
    try:
        return bool(value < before)
    except TypeError:
        return True


def in_order(values: Any) -> list[Any]:
    """Sorted; values of types that do not compare (tampered rows) by type name first."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=lambda value: (type(value).__name__, value))


HEAD_FIELDS_DIFFER = "135"  # the codes kind * 2 + 1
KIND_CODES = ("01", "23", "45")


@dataclass
class _Runs:
    """One kind's runs (one stream's consecutive versions each), in position order."""

    ids: list[Any] = field(default_factory=list)
    runs: list[list[Any]] = field(default_factory=list)

    def add(
        self, ids: list[Any], runs: list[list[Any]], kind: int, disordered: set[tuple[int, Any]]
    ) -> None:
        if ids and self.ids and self.ids[-1] == ids[0]:  # a run across the chunks' boundary
            last = self.runs[-1]
            if _lower(runs[0][0], last[-1]):
                disordered.add((kind, ids[0]))
            last.extend(runs[0])
            ids, runs = ids[1:], runs[1:]
        self.ids.extend(ids)
        self.runs.extend(runs)

    def streams(self, kind: int, disordered: set[tuple[int, Any]]) -> dict[Any, list[Any]]:
        """Each stream's versions, by stream id. Building a dict of 10^5 streams costs more than
        sorting them, so it is built once, in order: when no stream has two runs, straight from
        the sorted pairs; otherwise the runs of a stream are joined first."""
        if len(set(self.ids)) == len(self.ids):
            with contextlib.suppress(TypeError):  # stream ids of types that do not compare
                return dict(sorted(zip(self.ids, self.runs, strict=True)))
        joined: dict[Any, list[Any]] = {}
        for stream_id, run in zip(self.ids, self.runs, strict=True):
            earlier = joined.get(stream_id)
            if earlier is None:
                joined[stream_id] = run
            else:
                if _lower(run[0], earlier[-1]):
                    disordered.add((kind, stream_id))
                earlier.extend(run)
        return {stream_id: joined[stream_id] for stream_id in in_order(joined)}


def grouped(connect: Callable[[], Any], rows: str, prefix: int, last: int) -> Grouped:
    """The rows after the prefix, per kind and stream. ``rows`` selects ``code, stream_id,
    version`` in position order for the positions after ``?1`` between ``?2`` and ``?3``, the
    code being kind * 2, plus 1 when a head field may differ; ``connect`` gives the calling
    thread's connection to A with B attached. Grouping in SQL sorts every row (slower,
    measured), so Python groups them: position ranges of ``CHUNK`` are read by worker threads
    (SQLite compares the rows of each on its own core) while this thread groups the chunks
    already read, in position order."""
    span = max(0, last - prefix)
    pieces = [(prefix + lo, prefix + hi) for lo, hi in ranges(span, max(1, -(-span // CHUNK)))] or [
        (prefix + 1, prefix)
    ]
    pieces[-1] = (pieces[-1][0], MAX_POSITION)  # and whatever lies beyond the head
    found = {0: _Runs(), 1: _Runs(), 2: _Runs()}
    suspects: set[str] = set()
    disordered: set[tuple[int, str]] = set()

    def read(piece: tuple[int, int]) -> _Chunk:
        return _read_chunk(connect, rows, prefix, *piece)

    # Up to a million new lists that stay alive: the cycle collector would walk them again and
    # again while nothing is garbage (as in verify's folds; a quarter of the grouping, measured).
    collecting = gc.isenabled()
    gc.disable()
    try:
        if len(pieces) == 1:
            _group_chunk(read(pieces[0]), found, disordered, suspects)
        else:
            with ThreadPoolExecutor(max_workers=WORKERS) as pool:
                for chunk in pool.map(read, pieces):
                    _group_chunk(chunk, found, disordered, suspects)
        streams = {kind: runs.streams(kind, disordered) for kind, runs in found.items()}
    finally:
        if collecting:
            gc.enable()
    for kind, stream_id in disordered:
        streams[kind][stream_id] = in_order(streams[kind][stream_id])
    return Grouped(streams, suspects)
