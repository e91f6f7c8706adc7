"""``control_cycle.*``: one control into a running agent through foldline's live channel (ADR 0038)
against the same steps done by hand on raw APSW and a raw pipe.

foldline's cycle: ``SendControl`` decided and committed (``job.control``), the run's watcher
reading the pending controls from the read model, writing the line to the run's stdin and
committing ``job.control_delivered``, and the agent reading the line. The baseline is what a
careful script would do for the same guarantee: a durable insert of the control, the line
written to the pipe, a durable insert of its delivery, the line read; one WAL file with
``synchronous=FULL`` like the log's default. The ratio is the price of the rules, the
projections and the hash chain on both commits.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import apsw

from adapters.services.run import Deliveries
from engine.domain import channel as ch
from engine.domain import commands as c
from projections import open_engine


def _read_line(fd: int) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        data += os.read(fd, 65536)
    return data


def _foldline(folder: Path, controls: int) -> list[float]:
    engine = open_engine(folder / "log.db")
    engine.handle(c.CreateSession(session_id="s1", start_run_id="r1"))
    engine.handle(c.AcceptJob(job_id="j1", session_id="s1", owed=False))
    engine.handle(c.StartJob(job_id="j1", run_id="run1", input="lines"))
    read, write = os.pipe()
    deliveries = Deliveries(engine, "j1", "run1", os.fdopen(write, "wb"))
    spent = []
    try:
        for n in range(controls):
            started = time.perf_counter()
            engine.handle(ch.SendControl(job_id="j1", action="message", text=f"step {n}"))
            deliveries.pump()
            _read_line(read)
            spent.append(time.perf_counter() - started)
    finally:
        deliveries.close()
        os.close(read)
        engine.log.close()
    return spent


def _raw(folder: Path, controls: int) -> list[float]:
    db = apsw.Connection(str(folder / "raw.db"))
    db.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE controls (id INTEGER PRIMARY KEY, body TEXT, delivered INTEGER)")
    read, write = os.pipe()
    spent = []
    try:
        for n in range(controls):
            started = time.perf_counter()
            with db:
                db.execute("INSERT INTO controls (body) VALUES (?)", (f"step {n}",))
                control = db.last_insert_rowid()
            line = json.dumps({"id": control, "type": "message", "text": f"step {n}"}) + "\n"
            os.write(write, line.encode())
            with db:
                db.execute("UPDATE controls SET delivered = 1 WHERE id = ?", (control,))
            _read_line(read)
            spent.append(time.perf_counter() - started)
    finally:
        os.close(read)
        os.close(write)
        db.close()
    return spent


def bench_channel(controls: int) -> dict[str, float]:
    """Median milliseconds of one control's cycle on each side, and their ratio."""
    with tempfile.TemporaryDirectory(prefix="foldline-bench-channel-") as temporary:
        root = Path(temporary)
        raw = statistics.median(_raw(root, controls)) * 1000
        ours = statistics.median(_foldline(root, controls)) * 1000
    return {
        "control_cycle_ms.raw": raw,
        "control_cycle_ms.foldline": ours,
        "ratio.control_cycle": ours / raw,
    }


if __name__ == "__main__":
    for key, value in bench_channel(int(os.environ.get("CONTROLS", "300"))).items():
        print(f"{key}: {value:.3f}")
