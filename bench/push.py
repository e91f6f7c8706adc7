"""``push_cycle.*``: one push notification end to end through foldline's outbox (ADR 0039)
against the same steps done by hand on raw APSW and urllib, to the same loopback receiver.

foldline's cycle: a task transition committed with one push config (the outbox row is folded
in the same transaction), the deliverer's pass claiming it (``push.attempt_started``), the POST
with the 1.0 body, and the outcome committed (``push.delivered``). The baseline is what a
careful script would do for the same at-least-once guarantee: a durable insert of the state
change and its outbox row in one transaction, a durable claim, the same POST, a durable
delivered mark; one WAL file with ``synchronous=FULL`` like the log's default. The ratio is the
price of the rules, the read models, the hash chain and the payload built from them.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import apsw

from adapters.http.a2a.push import payload
from adapters.services.push import Deliverer, post
from adapters.system.url_policy import UrlPolicy
from engine.domain import commands as c
from engine.domain import push as push_
from projections import open_engine
from tests.support.receiver import receiver


def _foldline(folder: Path, url: str, count: int) -> list[float]:
    engine = open_engine(folder / "log.db")
    engine.handle(c.CreateSession(session_id="s1", start_run_id="r1"))
    deliverer = Deliverer(
        lambda: engine, "bench", UrlPolicy(["127.0.0.1"]), payload, stopping=threading.Event()
    )
    spent = []
    try:
        for n in range(count):
            engine.handle(c.CreateTask(task_id=f"t{n}", session_id="s1", message_id=f"m{n}"))
            engine.handle(push_.SetPushConfig(task_id=f"t{n}", config_id="c", url=url))
            started = time.perf_counter()
            engine.handle(c.CompleteTask(task_id=f"t{n}", result=f"done {n}"))
            deliverer.step(wait=True)
            spent.append(time.perf_counter() - started)
    finally:
        engine.log.close()
    return spent


def _raw(folder: Path, url: str, count: int) -> list[float]:
    db = apsw.Connection(str(folder / "raw.db"))
    db.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE tasks (id TEXT PRIMARY KEY, state TEXT, result TEXT)")
    db.execute(
        "CREATE TABLE outbox (id INTEGER PRIMARY KEY, task TEXT, url TEXT, state TEXT,"
        " attempts INTEGER)"
    )
    headers = {"Content-Type": "application/json"}
    spent = []
    try:
        for n in range(count):
            task = f"t{n}"
            db.execute("INSERT INTO tasks VALUES (?, 'working', '')", (task,))
            started = time.perf_counter()
            with db:
                db.execute(
                    "UPDATE tasks SET state = 'completed', result = ? WHERE id = ?",
                    (f"done {n}", task),
                )
                db.execute(
                    "INSERT INTO outbox (task, url, state, attempts) VALUES (?, ?, 'q', 0)",
                    (task, url),
                )
                row = db.last_insert_rowid()
            with db:
                db.execute("UPDATE outbox SET state = 's', attempts = 1 WHERE id = ?", (row,))
            body = json.dumps({"task": {"id": task, "status": {"state": "COMPLETED"}}}).encode()
            status, _ = post(url, body, headers, push_.TIMEOUT_S)
            with db:
                db.execute("UPDATE outbox SET state = ? WHERE id = ?", (str(status), row))
            spent.append(time.perf_counter() - started)
    finally:
        db.close()
    return spent


def bench_push(count: int) -> dict[str, float]:
    """Median milliseconds of one notification's cycle on each side, and their ratio."""
    with (
        tempfile.TemporaryDirectory(prefix="foldline-bench-push-") as temporary,
        receiver() as hook,
    ):
        root = Path(temporary)
        raw = statistics.median(_raw(root, hook.url, count)) * 1000
        ours = statistics.median(_foldline(root, hook.url, count)) * 1000
    return {
        "push_cycle_ms.raw": raw,
        "push_cycle_ms.foldline": ours,
        "ratio.push_cycle": ours / raw,
    }


if __name__ == "__main__":
    for key, value in bench_push(int(os.environ.get("PUSHES", "300"))).items():
        print(f"{key}: {value:.3f}")
