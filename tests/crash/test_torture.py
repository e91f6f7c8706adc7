"""Thirty random SIGKILLs of a whole server under a mixed workload (sync, async, SSE, A2A).

After each kill a new server takes the workspace over and recovers. At the end: nothing that
was acknowledged is lost, no job finished twice, every acknowledged job finished, the chain is
intact and the projections equal a rebuild.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from engine import open_log
from engine.domain import MACHINES
from projections import default_projections
from tests.crash.test_server_recovery import kill_everything
from tests.support.server import Server, serve

pytestmark = [pytest.mark.crash, pytest.mark.server, pytest.mark.slow]

ENV = {
    "FOLDLINE_RUNNER": 'read -r p; case "$p" in slow*) sleep 0.8;; esac; echo "r:$p"',
    "FOLDLINE_LEASE_RENEW_S": "0.2",
    "FOLDLINE_LEASE_STALE_S": "1",
    "FOLDLINE_LEASE_CONFIRM_S": "0.1",
}
TRIALS, BUDGET_S = 30, 300


class Workload:
    """Client threads that record what the server acknowledged."""

    def __init__(self, server: Server, seed: int) -> None:
        self.server, self.seed = server, seed
        self.acked: dict[str, str] = {}  # caller id -> "inv" | "a2a"
        self.finished: dict[str, dict[str, Any]] = {}  # caller id -> finished job body
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def run(self, clients: int = 3) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)
        ]
        for thread in threads:
            thread.start()
        return threads

    def _client(self, index: int) -> None:
        # One generator per client thread: a shared one would hand out its sequence in
        # whatever order the threads happen to run, so a seed would not replay a workload.
        rng = random.Random(self.seed * 1000 + index)
        n = 0
        while not self.stop.is_set():
            n += 1
            key = f"t{self.seed}-{index}-{n}"
            with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
                getattr(self, rng.choice(["sync", "async_", "sse", "a2a"]))(key)

    def _ack(self, key: str, kind: str) -> None:
        with self.lock:
            self.acked[key] = kind

    def sync(self, key: str) -> None:
        status, body = self.server.invoke({"prompt": f"sync {key}", "id": key}, timeout=10)
        if status == 200:
            self._ack(key, "inv")
            if body["status"] == "ok":
                self.finished[key] = body

    def async_(self, key: str) -> None:
        status, _ = self.server.invoke(
            {"prompt": f"slow {key}", "id": key, "async": True}, timeout=10
        )
        if status == 200:
            self._ack(key, "inv")

    def sse(self, key: str) -> None:
        conn = self.server.connection(timeout=10)
        try:
            conn.request(
                "POST",
                "/invocations",
                body=json.dumps({"prompt": f"slow {key}", "id": key}),
                headers={"Accept": "text/event-stream"},
            )
            answer = conn.getresponse()
            for line in answer:
                if line.startswith(b"event: accepted"):
                    self._ack(key, "inv")
                if line.startswith(b"event: result"):
                    break
        finally:
            conn.close()

    def a2a(self, key: str) -> None:
        status, _, raw = self.server.request(
            "POST",
            "/",
            {
                "jsonrpc": "2.0",
                "id": key,
                "method": "SendMessage",
                "params": {
                    "message": {"messageId": key, "parts": [{"text": f"a2a {key}"}]},
                    "configuration": {"returnImmediately": True},
                },
            },
            timeout=10,
        )
        if status == 200 and "result" in json.loads(raw):
            self._ack(key, "a2a")


def test_torture_random_sigkills_lose_nothing_and_finish_nothing_twice(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    rng = random.Random(30)
    acked: dict[str, str] = {}
    finished: dict[str, dict[str, Any]] = {}
    started, trials = time.monotonic(), 0
    while trials < TRIALS and time.monotonic() - started < BUDGET_S:
        with serve(workspace, ENV, workers=2) as server:
            load = Workload(server, seed=trials)
            threads = load.run()
            time.sleep(rng.uniform(1.5, 3.0))  # long enough to outwait the stale lease
            kill_everything(server)
            load.stop.set()
            for thread in threads:
                thread.join(timeout=15)
            acked |= load.acked
            finished |= load.finished
        trials += 1
    assert trials >= TRIALS, f"only {trials} kills within {BUDGET_S} s"
    with serve(workspace, ENV) as last:  # recovers, resumes, and lets every owed job finish
        deadline = time.monotonic() + 60
        pending = {k for k, kind in acked.items() if kind == "inv"}
        while pending and time.monotonic() < deadline:
            for key in list(pending):
                if last.invoke({"get": key})[1]["status"] != "running":
                    pending.discard(key)
            time.sleep(0.2)
        assert not pending, f"acknowledged jobs never finished: {sorted(pending)[:5]}"
    db = apsw.Connection(str(workspace / ".foldline" / "foldline.db"))
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    commands = {row[0] for row in db.execute("SELECT command_id FROM jobs")}
    lost = [k for k, kind in acked.items() if f"{kind}:{k}" not in commands]
    assert not lost, f"acknowledged but missing from the log: {lost[:5]}"
    twice = db.execute(
        "SELECT stream_id FROM events WHERE event_type = 'job.finished'"
        " GROUP BY stream_id HAVING count(*) > 1"
    ).fetchall()
    assert twice == []
    for key, body in finished.items():
        state = db.execute(
            "SELECT state FROM jobs WHERE job_id = ?", (body["invocation"],)
        ).fetchall()
        assert state == [("ok",)], key
    assert len(acked) > TRIALS  # the workload really ran
    resumed = db.execute("SELECT count(*) FROM jobs WHERE runs > 1").fetchall()[0][0]
    kinds = {kind: sum(1 for k in acked.values() if k == kind) for kind in ("inv", "a2a")}
    print(
        f"torture: {trials} kills, {len(acked)} acknowledged ({kinds}), {len(finished)} "
        f"finished in a sync answer, {resumed} jobs resumed after a kill, "
        f"{db.execute('SELECT max(position) FROM events').fetchall()[0][0]} events"
    )
    log = open_log(workspace / ".foldline" / "foldline.db", MACHINES, default_projections())
    assert log.verify_chain() == []
    assert log.content_hash() == log.rebuild()
    log.close()
