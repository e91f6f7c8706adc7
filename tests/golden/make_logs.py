"""Regenerate the golden logs (only when a new schema is released; they are history):

    .venv/bin/python -m tests.golden.make_logs

Writes ``logs/schema1.db`` (a clean log of the first schema, fixed clock), ``logs/schema1-fork.db``
(the same history, then a different ending), ``logs/schema1-broken.db`` (a payload edited behind
the triggers' back), and the expected outputs of verify, state and diff beside them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import apsw

from engine import FixedClock
from engine.domain import commands as c
from projections import open_engine

HERE = Path(__file__).parent / "logs"
ROOT = Path(__file__).resolve().parents[2]


def build(path: Path) -> None:
    engine = open_engine(path, clock=FixedClock())
    for i in range(3):
        engine.handle(c.CreateSession(session_id=f"s{i}", start_run_id=f"r{i}"))
        engine.handle(c.AcceptJob(job_id=f"j{i}", session_id=f"s{i}", prompt=f"p{i}"))
        engine.handle(c.StartJob(job_id=f"j{i}", run_id=f"run{i}"))
        engine.handle(c.FinishJob(job_id=f"j{i}", outcome="ok", result=f"done {i}"))
    engine.handle(c.CreateTask(task_id="t0", session_id="s0"))
    engine.log.close()


def cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "adapters.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout


def main() -> None:
    HERE.mkdir(exist_ok=True)
    for name in ("schema1.db", "schema1-fork.db", "schema1-broken.db"):
        (HERE / name).unlink(missing_ok=True)
    clean, fork, broken = HERE / "schema1.db", HERE / "schema1-fork.db", HERE / "schema1-broken.db"
    build(clean)
    shutil.copy(clean, fork)
    engine = open_engine(fork, clock=FixedClock())
    engine.handle(c.CancelSession(session_id="s1", reason="forked"))
    engine.log.close()
    shutil.copy(clean, broken)
    conn = apsw.Connection(str(broken))
    conn.execute("DROP TRIGGER events_refuse_update")
    conn.execute(
        'UPDATE events SET payload = CAST(\'{"type":"job.finished","outcome":'
        '"ok","result":"forged"}\' AS BLOB) WHERE position = 13'
    )
    conn.close()
    for db in (clean, fork, broken):  # one file each, no WAL beside it
        apsw.Connection(str(db)).execute("PRAGMA wal_checkpoint(TRUNCATE)")
    outputs = {
        "schema1.verify.json": cli("verify", str(clean)),
        "schema1-broken.verify.json": cli("verify", str(broken)),
        "schema1.state-at-10.json": cli("state", str(clean), "--at", "10"),
        "schema1.diff-fork.json": cli("diff", str(clean), str(fork), "--json"),
    }
    for name, text in outputs.items():
        data = json.loads(text)
        data.pop("db", None)
        (HERE / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
