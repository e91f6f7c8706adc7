"""Audit speed on large logs: ``verify.events_per_s`` (the whole verify: chain, legality by
replay, projections equal to a fresh fold), ``ratio.verify_vs_chain_floor`` (verify's rate over
a plain one-process loop that scans the same rows and recomputes the chain, run just before),
``legality_floor.events_per_s`` (a verify stripped to scan, hash and legality, on both
cores, no payload decoded, nothing folded: the gap to it is what replay and folds cost),
``export.events_per_s``, and ``diff`` of two logs that part near the end
(``diff.seconds_late_divergence``) or near the start (``diff.seconds_early_divergence``) beside
SQLite's own compare of the rows (``bench.audit_diff``). Every figure includes opening the
inputs, which are read in place."""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import apsw
import msgspec

from bench.audit_diff import append_one, diff_figures
from bench.ready import build
from engine import chain
from engine.audit import export_line, reading, tables, verify
from engine.audit.replay import MMAP_BYTES
from engine.audit.source import COLUMNS
from engine.audit.tables import share_of
from engine.domain import MACHINES
from engine.events import RecordedEvent
from engine.machines import Machines, StreamHead
from projections import default_projections


def _db(workspace: Path) -> Path:
    return workspace / ".foldline" / "foldline.db"


def kept_log(workspace: Path, events: int) -> Path:
    """The log of ``events`` job events in ``workspace``, built on first use and kept, so that
    profiles run again and again on one large log."""
    if not _db(workspace).is_file():
        build(workspace, events)
    return _db(workspace)


def chain_floor(db: Path) -> float:
    """Seconds for the plainest chain check: one process, one scan, one link per row."""
    started = time.perf_counter()
    with reading(db) as reader:
        broken = list(chain.check_rows(reader.iter_rows()))
    assert not broken, broken[:3]
    return time.perf_counter() - started


def _share_rows(reader: Any, part: int, parts: int) -> Any:
    """The rows of one share of the streams with the hash stored before each, in position
    order, as ``verify`` reads them."""
    return reader.rows(
        f"SELECT {', '.join('e.' + c for c in COLUMNS.split(', '))},"
        " coalesce(p.hash, CASE WHEN e.position = 1 THEN ?2 END) FROM events e"
        " LEFT JOIN events p ON p.position = e.position - 1"
        f" WHERE {share_of('e.stream_id', parts)} ORDER BY e.position",
        (part, chain.GENESIS),
    )


def _legal_share(path: str, part: int, parts: int) -> int:
    """One share of the cheapest verify there is: the rows of its streams with the hash stored
    before each (as ``verify`` reads them), each link recomputed, each (state, event type)
    looked up in the machines' tables; no payload decoded, no guard run, nothing folded."""
    table = {
        (machine.kind, key): rules
        for machine in Machines(MACHINES).by_kind.values()
        for key, rules in machine.table.items()
    }
    heads: dict[str, str | None] = {}
    legal = 0
    with reading(path) as reader:
        reader.query(f"PRAGMA mmap_size = {MMAP_BYTES}")
        for (position, stream_id, version, event_type, recorded_at, epoch, command_id, state,
             payload, digest, previous) in _share_rows(reader, part, parts):  # fmt: skip
            link = chain.link(
                previous, position, stream_id, version, event_type,
                recorded_at, epoch, command_id, state, payload,
            )  # fmt: skip
            kind = stream_id.partition(":")[0]
            if link == digest and (kind, (heads.get(stream_id), event_type)) in table:
                legal += 1
            heads[stream_id] = state
    return legal


def _complete_share(path: str, part: int, parts: int, read_models: bool = False) -> int:
    """One share of the cheapest *complete* verify: ``_legal_share``'s scan, link and legality
    (guards run, so payloads are decoded), the least fold there is (each stream's head, kept
    as the ``streams`` row it must equal) and that fold compared with the stored ``streams``
    rows of the share. Nothing a real verify could leave out of the chain, legality and the
    engine's own table, and nothing more.

    It does not refold the domain read models (``jobs``, ``runs``, ``channel`` on this log),
    which ``verify`` must also prove equal to a fresh fold. ``read_models``: do that too, the
    cheapest way foldline has: each event, as a ``RecordedEvent``, through the routes of each
    read model's memory fold (the code ``verify`` runs), the rows they keep compared with the
    stored tables of the share (``tables.compare_rows``)."""
    machines = Machines(MACHINES)
    routes: dict[str, list[Any]] = {}
    kept: list[Any] = []
    not_folded: set[str] = set()
    if read_models:
        scratch = apsw.Connection(":memory:")
        for projection in default_projections():
            scratch.execute(projection.ddl)
            folder = projection.memory_folder(scratch.cursor())
            if folder.rows is None or folder.routes is None:
                # (tasks, push: they fold no event of the bench log; asserted below)
                not_folded.update(folder.event_types or ("*",))
                continue
            kept.append(folder.rows)
            for event_type, route in folder.routes.items():
                routes.setdefault(event_type, []).append(route)
    envelope = RecordedEvent.from_row
    decoders = {
        event_type: msgspec.json.Decoder(cls).decode
        for machine in machines.by_kind.values()
        for event_type, cls in machine.event_classes.items()
    }
    # (kind, state, event type) -> the next state, for transitions no guard decides
    unguarded = {
        (machine.kind, *key): rules[0].dest
        for machine in machines.by_kind.values()
        for key, rules in machine.table.items()
        if len(rules) == 1 and rules[0].guard is None
    }
    heads: dict[str, list[Any]] = {}
    legal = 0
    with reading(path) as reader:
        reader.query(f"PRAGMA mmap_size = {MMAP_BYTES}")
        connection = reader.log.connection()
        connection.execute("BEGIN")
        for row in _share_rows(reader, part, parts):
            (position, stream_id, version, event_type, recorded_at, epoch, command_id, state,
             payload, digest, previous) = row  # fmt: skip
            link = chain.link(
                previous, position, stream_id, version, event_type,
                recorded_at, epoch, command_id, state, payload,
            )  # fmt: skip
            head = heads.get(stream_id)
            if head is None:
                kind = stream_id.partition(":")[0]
                head = heads[stream_id] = [
                    stream_id, kind, 0, None, position, position, recorded_at, recorded_at,
                ]  # fmt: skip
            event = decoders[event_type](payload)
            assert event_type not in not_folded, event_type
            folds = routes.get(event_type)
            if folds is not None:
                recorded, entity = envelope(row, event), stream_id.partition(":")[2]
                for fold in folds:
                    fold(recorded, entity)
            after = unguarded.get((head[1], head[3], event_type), _GUARDED)
            if after is _GUARDED:  # the guards decide, on the decoded event
                after = machines.by_kind[head[1]].next_state(
                    StreamHead(stream_id, head[2], head[3]), event, event_type
                )
            elif after is None:  # a transition that keeps the state
                after = head[3]
            if link == digest and after == state and version == head[2] + 1:
                legal += 1
            head[2], head[3], head[5], head[7] = version, state, position, recorded_at
        stored = 0
        for row in connection.execute(
            f"SELECT * FROM streams WHERE {share_of('stream_id', parts)}",
            (part,) if parts > 1 else (),
        ):
            mine = heads.get(row[0])
            if mine is not None and tuple(mine) == row:
                stored += 1
        for rows in kept:
            differing, folded, _ = tables.compare_rows(connection, rows(), part, parts)
            assert differing == 0, (differing, folded)
        connection.execute("COMMIT")
    assert stored == len(heads), (stored, len(heads))
    return legal


_GUARDED = object()


def complete_floor(db: Path, parts: int = 2) -> float:
    """Seconds for the cheapest complete verify: ``_complete_share`` on ``parts`` processes."""
    return _on_processes(db, _complete_share, parts)


def read_model_floor(db: Path, parts: int = 2) -> float:
    """Seconds for ``_complete_share`` with the domain read models refolded and compared."""
    return _on_processes(db, partial(_complete_share, read_models=True), parts)


def legality_floor(db: Path, parts: int = 2) -> float:
    """Seconds for the cheapest verify: ``_legal_share`` on ``parts`` processes."""
    return _on_processes(db, _legal_share, parts)


def _on_processes(db: Path, share: Callable[[str, int, int], int], parts: int) -> float:
    started = time.perf_counter()
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(parts, mp_context=context) as pool:
        shares = [pool.submit(share, str(db), part, parts) for part in range(parts)]
        legal = sum(share.result() for share in shares)
    with reading(db) as reader:
        assert legal == reader.head(), (legal, reader.head())
    return time.perf_counter() - started


def bench_audit(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="foldline-audit-bench-") as folder:
        root = Path(folder)
        a, early = root / "a", root / "early"
        build(a, n)
        build(early, n, result="different")  # parts from A at the first finished job
        floor_s = chain_floor(_db(a))
        started = time.perf_counter()
        report = verify(_db(a), MACHINES, default_projections())
        verify_s = time.perf_counter() - started
        legality_s = legality_floor(_db(a))
        complete_s = complete_floor(_db(a))
        read_models_s = read_model_floor(_db(a))
        assert report.ok, report.violations[:3]
        started = time.perf_counter()
        with reading(_db(a)) as reader:
            exported = sum(len(export_line(row)) for row in reader.iter_rows())
        export_s = time.perf_counter() - started
        assert exported
        late = root / "late"
        shutil.copytree(a, late)
        append_one(_db(a), "job:tail-a")
        append_one(_db(late), "job:tail-late")
        figures = diff_figures(_db(a), _db(late), _db(early))
    return {
        "audit.events": float(n),
        "chain_floor.events_per_s": n / floor_s,
        "verify.events_per_s": n / verify_s,
        "ratio.verify_vs_chain_floor": floor_s / verify_s,
        # A verify stripped to scan, hash and legality, on both cores: no decode, no fold.
        "legality_floor.events_per_s": n / legality_s,
        "ratio.verify_vs_legality_floor": legality_s / verify_s,
        # The cheapest complete verify, on both cores: legality with guards (so payloads
        # decoded), each stream's head folded and compared with the stored `streams` rows.
        "complete_floor.events_per_s": n / complete_s,
        "ratio.verify_vs_complete_floor": complete_s / verify_s,
        # The same with every domain read model refolded and compared, through the memory
        # folds verify runs: what verify must do beyond the complete floor.
        "read_model_floor.events_per_s": n / read_models_s,
        "ratio.verify_vs_read_model_floor": read_models_s / verify_s,
        # The most `verify_vs_complete_floor` can be while the read models are refolded at
        # all: the complete floor over that floor with the folds (the goal's measured floor).
        "ratio.read_model_floor_vs_complete_floor": complete_s / read_models_s,
        "export.events_per_s": n / export_s,
        **figures,
    }
