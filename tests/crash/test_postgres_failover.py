"""Two ``foldline serve`` instances on one PostgreSQL log, as two hosts would run them.

No lease file: the lease stream and the epoch the head row carries are the only gate (ADR
0026). One instance serves, the other answers lease-busy to writes but serves reads and SSE,
woken by LISTEN/NOTIFY; after kill -9 of the first it takes over once the stale window has
passed, recovers and finishes the cut-off job exactly once; a frozen holder woken after the
takeover writes nothing and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from adapters.settings.config import LEASE_BUSY_TEXT
from engine import open_log
from engine.domain import MACHINES
from engine.storage.postgres.storage import PostgresStorage
from projections import default_projections
from tests.support.postgres import session_cluster
from tests.support.server import RECOVERY_ENV, RECOVERY_RUNNER, Server, read_events, serve
from tests.support.server import poll_invocation as _poll

pytestmark = [pytest.mark.crash, pytest.mark.server, pytest.mark.slow]

RUNNER = RECOVERY_RUNNER
ENV = RECOVERY_ENV


def _rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    storage = PostgresStorage(url)
    try:
        rows: list[Any] = storage.connection().execute(sql, params).fetchall()
    finally:
        storage.close()
    return rows


def _kill_everything(server: Server, url: str) -> None:
    """SIGKILL the instance (master and workers), then the runs it had started."""
    runs = _rows(url, "SELECT pid FROM jobs WHERE state IN ('running', 'cancelling') AND pid > 1")
    os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=10)
    for (pid,) in runs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _workspaces(tmp_path: Path) -> tuple[Path, Path]:
    # One folder per instance, as on two hosts: only the database is shared.
    first, second = tmp_path / "host1", tmp_path / "host2"
    first.mkdir()
    second.mkdir()
    return first, second


def test_postgres_second_instance_reads_and_follows_then_takes_over_after_kill_9(
    tmp_path: Path,
) -> None:
    url = session_cluster().url_for(tmp_path)
    env = {**ENV, "FOLDLINE_DB": url}
    host1, host2 = _workspaces(tmp_path)
    with serve(host1, env, workers=2) as first:
        _, receipt = first.invoke({"prompt": "slow work", "id": "k1", "async": True})
        job = receipt["invocation"]
        with serve(host2, env) as second:
            follow = second.connection(timeout=30)
            follow.request(
                "GET",
                "/v1/events",
                headers={
                    "Accept": "text/event-stream",
                    "Authorization": f"Bearer {second.token}",
                },
            )
            events = read_events(follow.getresponse(), limit=60)
            assert next(events) == {"comment": "following"}

            status, _, raw = second.request("POST", "/invocations", {"prompt": "mine?"})
            assert status == 503 and LEASE_BUSY_TEXT in raw.decode()
            status, _, raw = second.request("GET", f"/v1/jobs/{job}")
            assert status == 200 and json.loads(raw)["state"] == "running"
            # A job the first instance finishes reaches the second's SSE follower: the only
            # way across the two is the NOTIFY of the first's commits.
            _, quick = first.invoke({"prompt": "quick"})
            assert quick["status"] == "ok"
            seen = next(
                e
                for e in events
                if e.get("event") == "job.finished"
                and json.loads(e["data"])["stream_id"] == f"job:{quick['invocation']}"
            )
            assert seen

            _kill_everything(first, url)
            running = second.invoke({"get": "k1"})[1]
            assert running["status"] == "running"  # cut off, not yet taken over
            body = _poll(second, "k1", "ok")
            assert body["invocation"] == job
            assert body["result"] == "done: slow work resumed=1\n"
            assert second.invoke({"prompt": "after recovery"})[1]["status"] == "ok"
            follow.close()
    assert not list(host1.glob("**/*.lease")) and not list(host2.glob("**/*.lease"))
    finished = _rows(
        url,
        "SELECT count(*) FROM events WHERE stream_id = ? AND event_type = 'job.finished'",
        (f"job:{job}",),
    )
    assert finished == [(1,)]
    lease = _rows(
        url,
        "SELECT event_type, epoch FROM events WHERE stream_id = 'lease:workspace'"
        " AND event_type != 'lease.renewed' ORDER BY position",
    )
    assert lease[:2] == [("lease.acquired", 1), ("lease.taken_over", 2)]
    assert _rows(url, "SELECT epoch FROM head")[0][0] >= 2
    log = open_log(url, MACHINES, default_projections())
    assert log.verify_chain() == []
    assert log.content_hash() == log.rebuild()
    log.close()


def test_postgres_frozen_holder_woken_after_a_takeover_writes_nothing_and_exits(
    tmp_path: Path,
) -> None:
    url = session_cluster().url_for(tmp_path)
    env = {**ENV, "FOLDLINE_DB": url}
    host1, host2 = _workspaces(tmp_path)
    with serve(host1, env) as first:
        _, receipt = first.invoke({"prompt": "slow zombie", "id": "z1", "async": True})
        (runner_pid,) = _rows(
            url, "SELECT pid FROM jobs WHERE job_id = ?", (receipt["invocation"],)
        )[0]
        os.killpg(first.process.pid, signal.SIGSTOP)  # master and workers freeze
        os.killpg(runner_pid, signal.SIGSTOP)
        try:
            with serve(host2, env) as second:
                body = _poll(second, "z1", "ok")  # waits out the stale window, takes over
                assert body["result"] == "done: slow zombie resumed=1\n"
                takeover = _rows(
                    url, "SELECT max(position) FROM events WHERE event_type = 'lease.taken_over'"
                )[0][0]
                os.killpg(first.process.pid, signal.SIGCONT)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(runner_pid, signal.SIGCONT)
                # The woken holder's next renewal sees the newer epoch and exits; nothing it
                # tried to write under its old epoch got past the head row's fence.
                first.process.wait(timeout=30)
                assert second.invoke({"prompt": "still serving"})[1]["status"] == "ok"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.process.pid, signal.SIGCONT)
    after = _rows(
        url, "SELECT DISTINCT epoch FROM events WHERE position > ? ORDER BY epoch", (takeover,)
    )
    assert after == [(2,)]
    log = open_log(url, MACHINES, default_projections())
    assert log.verify_chain() == []
    log.close()
