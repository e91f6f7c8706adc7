"""The log's own figures, each against a baseline measured in the same run: durable appends
against raw APSW, the group commit against one writer, a rebuild against a scan, a job's life
through the command API against its events appended, and one event per call against the
``eventsourcing`` library (and its ceiling, raw APSW at one row per durable commit).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import msgspec

from bench.common import (
    STREAMS,
    TEXT,
    WITH_SERVER_MODELS,
    ItemCreated,
    Workdir,
    build_log,
    concurrent_appends,
    engine_appends,
    item_event,
    run_threads,
)
from engine import open_log
from engine.domain import MACHINES
from engine.log import Sync
from projections import default_projections


def raw_appends(path: Path, n: int, sync: Sync) -> float:
    """The floor: raw APSW doing BEGIN IMMEDIATE, a version check, one INSERT, COMMIT."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = apsw.Connection(str(path))
    conn.set_busy_timeout(10_000)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync.upper()}")
    conn.execute(
        "CREATE TABLE events (position INTEGER PRIMARY KEY, stream_id TEXT, version INTEGER,"
        " event_type TEXT, payload BLOB, UNIQUE (stream_id, version))"
    )
    encode = msgspec.json.encode
    versions = [0] * STREAMS
    started = time.perf_counter()
    for i in range(n):
        k = i % STREAMS
        stream_id = f"item:s{k}"
        event = item_event(i, versions[k])
        conn.execute("BEGIN IMMEDIATE")
        head = conn.execute(
            "SELECT coalesce(max(version), 0) FROM events WHERE stream_id = ?", (stream_id,)
        ).fetchall()[0][0]
        conn.execute(
            "INSERT INTO events VALUES (NULL, ?, ?, ?, ?)",
            (stream_id, head + 1, event.__struct_config__.tag, encode(event)),
        )
        conn.execute("COMMIT")
        versions[k] += 1
    rate = n / (time.perf_counter() - started)
    conn.close()
    return rate


def bench_append(work: Workdir, n: int, sync: Sync) -> dict[str, float]:
    # The baseline runs before and after the engine and is averaged, so that drift in the
    # machine's speed during a run does not favour either side.
    before = raw_appends(work.path(), n, sync)
    log = open_log(work.path(), WITH_SERVER_MODELS, default_projections(), sync=sync)
    ours = engine_appends(log, n)
    log.close()
    raw = (before + raw_appends(work.path(), n, sync)) / 2
    return {
        f"append_{sync}.raw_events_per_s": raw,
        f"append_{sync}.events_per_s": ours,
        f"ratio.append_{sync}_vs_raw": ours / raw,
    }


def bench_group_commit(work: Workdir, n: int, threads: int = 16) -> dict[str, float]:
    """16 threads appending vs one, on one log at FULL, with the floor of that ratio measured
    in the same rounds: raw APSW appending alone (``raw_appends``, the baseline of
    ``append_full_vs_raw``) and raw APSW sharing one commit between the 16 callers
    (``RawGroupCommit``, the best batching there is). ``ratio.raw_group_vs_raw_single`` is
    what batching 16 commits into one gives at all on this disk: meeting
    ``group_commit_vs_single >= 4`` with ``append_full_vs_raw >= 0.85`` needs it at 3.4 or
    more, since our 16 threads cannot outrun the raw group."""
    log = open_log(work.path(), WITH_SERVER_MODELS, default_projections())
    group_floor = RawGroupCommit(work.path(), threads)
    # In rounds, taking turns, so that the disk's mood (its sync moves by 10x within a
    # minute on a shared box) falls on each side alike.
    rounds = 3
    each = max(threads, n // rounds)
    calls = max(1, each // threads)
    together = calls * threads  # each round's events from the 16 threads
    seconds = {"single": 0.0, "threads": 0.0, "raw_single": 0.0, "raw_threads": 0.0}
    for r in range(rounds):
        seconds["single"] += each / engine_appends(log, each, prefix=f"single{r}-")
        seconds["raw_single"] += each / raw_appends(work.path(), each, "full")
        seconds["threads"] += together / concurrent_appends(log, together, threads, f"r{r}-")
        seconds["raw_threads"] += together / _threads(
            threads, calls, lambda t, i, r=r: group_floor.append(t, f"item:g{r}-{t}-{i}")
        )
    group_floor.conn.close()
    log.close()
    single, raw_single = (rounds * each / seconds[k] for k in ("single", "raw_single"))
    concurrent, raw_group = (rounds * together / seconds[k] for k in ("threads", "raw_threads"))
    return {
        "group_commit.single_events_per_s": single,
        f"group_commit.threads{threads}_events_per_s": concurrent,
        "ratio.group_commit_vs_single": concurrent / single,
        "group_commit.raw_single_events_per_s": raw_single,
        f"group_commit.raw_threads{threads}_events_per_s": raw_group,
        "ratio.raw_group_vs_raw_single": raw_group / raw_single,
        "ratio.group_commit_vs_raw_group": concurrent / raw_group,
    }


def bench_rebuild(work: Workdir, n: int) -> dict[str, float]:
    log = build_log(work.path(), n)
    decoders = {tag: msgspec.json.Decoder(cls) for tag, cls in log.codec._classes.items()}
    conn = log.connection()
    started = time.perf_counter()
    count = 0
    for row in conn.execute(
        "SELECT position, stream_id, version, event_type, recorded_at, epoch, command_id, state,"
        " payload, hash FROM events ORDER BY position"
    ):
        decoders[row[3]].decode(row[8])
        count += 1
    scan = count / (time.perf_counter() - started)
    started = time.perf_counter()
    log.rebuild()
    rebuild = n / (time.perf_counter() - started)
    log.close()
    return {
        "rebuild.events": float(n),
        "rebuild.scan_decode_events_per_s": scan,
        "rebuild.events_per_s": rebuild,
        "ratio.rebuild_vs_scan": rebuild / scan,
    }


def bench_job_lifecycle(work: Workdir, n: int) -> dict[str, float]:
    """accept -> start -> finish through the command API vs the same three events appended
    straight to the log (same machines and read models, both durable)."""
    from engine.domain import commands as c
    from engine.domain.job import JobAccepted, JobFinished, JobStarted
    from projections import open_engine

    log = open_log(work.path(), MACHINES, default_projections())
    started = time.perf_counter()
    for i in range(n):
        stream = f"job:raw{i}"
        log.append(stream, 0, [JobAccepted(session="s")])
        log.append(stream, 1, [JobStarted(run_id=f"run{i}")])
        log.append(stream, 2, [JobFinished(outcome="ok", result=TEXT)])
    raw = n / (time.perf_counter() - started)
    log.close()
    engine = open_engine(work.path())
    engine.handle(c.CreateSession(session_id="s", start_run_id="r"))
    started = time.perf_counter()
    for i in range(n):
        engine.handle(c.AcceptJob(job_id=f"j{i}", session_id="s", owed=False))
        engine.handle(c.StartJob(job_id=f"j{i}", run_id=f"run{i}"))
        engine.handle(c.FinishJob(job_id=f"j{i}", outcome="ok", result=TEXT))
    ours = n / (time.perf_counter() - started)
    engine.log.close()
    return {
        "job_lifecycle.log_jobs_per_s": raw,
        "job_lifecycle.jobs_per_s": ours,
        "ratio.job_lifecycle_vs_raw": ours / raw,
    }


def _eventsourcing_app(path: Path) -> tuple[Any, Callable[[], None]]:
    """An eventsourcing SQLite Application and a function that saves one new aggregate."""
    from eventsourcing.application import Application

    app = Application(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)}
    )
    return app, lambda: app.save(_es_ticket()(text=TEXT))


@functools.cache
def _es_ticket() -> Any:
    # Defined once per process: eventsourcing refuses two classes with one topic.
    from eventsourcing.domain import Aggregate, event

    class Ticket(Aggregate):  # type: ignore[misc]
        @event("Opened")  # type: ignore[untyped-decorator]
        def __init__(self, text: str) -> None:
            self.text = text

    return Ticket


class RawInserts:
    """The ceiling of one event per durable commit: raw APSW at FULL doing BEGIN IMMEDIATE, one
    INSERT, COMMIT, and nothing else (no version check, no envelope, no read models)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = apsw.Connection(str(path))
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(
            "CREATE TABLE events (position INTEGER PRIMARY KEY, stream_id TEXT, version INTEGER,"
            " event_type TEXT, payload BLOB, UNIQUE (stream_id, version))"
        )
        self.payload = msgspec.json.encode(ItemCreated(text=TEXT))
        self.count = 0

    def insert(self, n: int) -> None:
        execute, payload = self.conn.execute, self.payload
        for _ in range(n):
            self.count += 1
            execute("BEGIN IMMEDIATE")
            execute(
                "INSERT INTO events VALUES (NULL, ?, 1, 'item.created', ?)",
                (f"item:r{self.count}", payload),
            )
            execute("COMMIT")


class RawGroupCommit(RawInserts):
    """The floor of durable appends from ``count`` threads: raw APSW at FULL where every
    caller's row shares one transaction and one sync with the other ``count - 1`` callers'
    rows (the best batching there is), and nothing else. Each caller puts its row in its
    slot and waits at a barrier; the last to arrive runs BEGIN IMMEDIATE, one
    ``executemany`` INSERT and COMMIT before the barrier lets any of them go, so a caller
    returns only after the COMMIT that holds its row. No queue to hand over, no version
    check, envelope, chain or read model. Every thread must make the same number of calls."""

    def __init__(self, path: Path, count: int) -> None:
        super().__init__(path)
        self._rows: list[tuple[str, bytes]] = [("", b"")] * count
        self._barrier = threading.Barrier(count, action=self._commit)

    def append(self, thread: int, stream_id: str) -> None:
        self._rows[thread] = (stream_id, self.payload)
        self._barrier.wait()

    def _commit(self) -> None:
        execute = self.conn.execute
        execute("BEGIN IMMEDIATE")
        self.conn.executemany(
            "INSERT INTO events VALUES (NULL, ?, 1, 'item.created', ?)", self._rows
        )
        execute("COMMIT")


def _threads(count: int, calls: int, call: Callable[[int, int], None]) -> float:
    """Calls per second of ``count`` threads each making ``calls`` calls ``call(thread, i)``."""
    return count * calls / run_threads(count, calls, call)


def bench_eventsourcing(work: Workdir, n: int, threads: int = 16) -> dict[str, float]:
    """Our durable append vs one event saved per call by eventsourcing's SQLite Application
    (stdlib sqlite3, WAL, ``BEGIN``, one INSERT, ``COMMIT`` at SQLite's default
    synchronous=FULL), with the ceiling of that workload measured in the same run: raw APSW
    inserting one row per durable commit. Extra, labelled ``threads16``: both under 16
    concurrent writers, where foldline's group commit shares one sync between callers, with
    its floor measured in the same run: raw APSW sharing one sync between the 16
    (``RawGroupCommit``)."""
    path = work.path()
    path.parent.mkdir(parents=True)
    app, save_one = _eventsourcing_app(path)
    log = open_log(work.path(), WITH_SERVER_MODELS, default_projections())
    raw_log = RawInserts(work.path())
    # The three take turns in rounds, so that the disk's mood during the run (fsync moves
    # by 10x on a shared box) falls on each of them alike.
    rounds = 5
    each = max(1, n // rounds)
    seconds = {"theirs": 0.0, "ours": 0.0, "raw": 0.0}
    for r in range(rounds):
        started = time.perf_counter()
        for _ in range(each):
            save_one()
        seconds["theirs"] += time.perf_counter() - started
        seconds["ours"] += each / engine_appends(log, each, prefix=f"r{r}-")
        started = time.perf_counter()
        raw_log.insert(each)
        seconds["raw"] += time.perf_counter() - started
    theirs, ours, raw = (rounds * each / seconds[k] for k in ("theirs", "ours", "raw"))
    raw_log.conn.close()
    # Under 16 threads too, in rounds: the threads of eventsourcing, of the floor (what
    # sharing one sync between 16 callers gives at all, at eventsourcing's durability, with
    # no work per event but the row itself) and ours. One long run each, one after the
    # other, had each meet another disk (6x apart within a minute here).
    group_floor = RawGroupCommit(work.path(), threads)
    item = ItemCreated(text=TEXT)
    calls = max(1, n // threads // rounds)
    threaded = {"theirs": 0.0, "raw": 0.0, "ours": 0.0}
    for r in range(rounds):
        threaded["theirs"] += 1 / _threads(threads, calls, lambda t, i: save_one())
        threaded["raw"] += 1 / _threads(
            threads, calls, lambda t, i, r=r: group_floor.append(t, f"item:g{r}-{t}-{i}")
        )
        threaded["ours"] += 1 / _threads(
            threads, calls, lambda t, i, r=r: log.append(f"item:c{r}-{t}-{i}", 0, [item])
        )
    app.close()
    group_floor.conn.close()
    theirs_threads, raw_threads, ours_threads = (
        rounds / threaded[k] for k in ("theirs", "raw", "ours")
    )
    log.close()
    return {
        "eventsourcing.save_events_per_s": theirs,
        "eventsourcing.foldline_events_per_s": ours,
        "eventsourcing.raw_full_events_per_s": raw,
        "ratio.append_vs_eventsourcing": ours / theirs,
        "ratio.raw_full_vs_eventsourcing": raw / theirs,
        "eventsourcing.threads16_save_events_per_s": theirs_threads,
        "eventsourcing.threads16_foldline_events_per_s": ours_threads,
        "ratio.append_vs_eventsourcing_threads16": ours_threads / theirs_threads,
        "eventsourcing.threads16_raw_group_events_per_s": raw_threads,
        "ratio.raw_group_vs_eventsourcing_threads16": raw_threads / theirs_threads,
        "ratio.append_vs_raw_group_threads16": ours_threads / raw_threads,
    }
