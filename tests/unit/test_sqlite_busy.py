"""SQLite answers SQLITE_BUSY at once, without its busy handler, in a few cases; none may reach
a caller of the log. Here: processes that open one new file at the same moment."""

from __future__ import annotations

import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import subprocess
import sys
import threading
from pathlib import Path

import apsw

from engine.storage.sqlite.storage import SqliteStorage

# A process that opened the new file in rollback mode and holds its write lock, as a
# connection in the middle of switching that file to WAL does.
_HOLD_WRITE_LOCK = """
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""

ROUNDS = 25
OPENERS = 6


def _journal_mode(path: Path) -> str:
    conn = apsw.Connection(str(path))
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchall()[0][0])
    finally:
        conn.close()


def test_sqlite_open_waits_for_another_process_switching_a_new_file_to_wal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new.db"
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD_WRITE_LOCK, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "held\n"
        outcome: list[BaseException | None] = []

        def connect() -> None:
            storage = SqliteStorage(str(path), "full", 10_000)
            try:
                storage.connection().execute("SELECT 1")
                outcome.append(None)
            except Exception as ex:  # the test reports it, whatever it is
                outcome.append(ex)
            finally:
                storage.close()

        opener = threading.Thread(target=connect)
        opener.start()
        # Unfixed, the open fails at once while the lock is held; fixed, it waits for the
        # lock, so this join times out and the holder is then let go.
        opener.join(timeout=1)
        holder.stdin.write("\n")
        holder.stdin.flush()
        opener.join(timeout=15)
        assert holder.wait(timeout=15) == 0
        assert outcome == [None]
        assert _journal_mode(path) == "wal"


def _open_each(
    paths: list[str],
    start: multiprocessing.synchronize.Barrier,
    failures: multiprocessing.queues.Queue[str],
) -> None:
    for path in paths:
        start.wait(timeout=30)
        storage = SqliteStorage(path, "full", 10_000)
        try:
            storage.connection().execute("SELECT 1")
        except Exception as ex:  # counted and shown by the test
            failures.put(f"{type(ex).__name__}: {ex}")
        finally:
            storage.close()


def test_sqlite_processes_opening_one_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    # Spawned, not forked: this process may already run threads of other tests' logs.
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(OPENERS)
    failures: multiprocessing.queues.Queue[str] = context.Queue()
    paths = [str(tmp_path / f"round{r}.db") for r in range(ROUNDS)]
    openers = [
        context.Process(target=_open_each, args=(paths, start, failures)) for _ in range(OPENERS)
    ]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join(timeout=120)
    assert [o.exitcode for o in openers] == [0] * OPENERS
    seen = []
    while not failures.empty():
        seen.append(failures.get(timeout=5))
    assert seen == []
    assert {_journal_mode(Path(p)) for p in paths} == {"wal"}
