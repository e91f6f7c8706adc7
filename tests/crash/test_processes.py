"""Real processes: two writers at once, SIGKILL mid-append, cross-process wake-ups, fork."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import pytest

from engine import Log, open_log, open_notifier
from tests.support.tickets import MACHINES, TicketOpened, TicketTitles

ROOT = Path(__file__).resolve().parents[2]


def _writer(db: Path, prefix: str, count: int, sync: str = "full") -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.writer", str(db), prefix, str(count), "--sync", sync],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


def _finish(child: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """Wait for the child; its stdout after the "ready" line, and its stderr.

    Reads through the same text wrappers as ``_writer`` did: ``communicate`` would skip lines
    already buffered by that first ``readline``.
    """
    assert child.stdout is not None and child.stderr is not None
    with child.stdout, child.stderr:
        out = child.stdout.read()  # EOF when the child exits or is killed
        err = child.stderr.read()
    child.wait(timeout=timeout)
    return out, err


def _audit(db: Path) -> Log:
    """Reopen after the children are gone and check what every test here must hold."""
    conn = apsw.Connection(str(db))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
    log = open_log(db, MACHINES, [TicketTitles()])
    assert log.verify_chain() == []
    assert log.content_hash() == log.rebuild()
    return log


@pytest.mark.crash
def test_log_two_processes_append_concurrently_without_gaps_or_locks(tmp_path: Path) -> None:
    db = tmp_path / "two.db"
    open_log(db, MACHINES).close()
    children = [_writer(db, name, 300, "normal") for name in ("a", "b")]
    outputs = [_finish(child, 120) for child in children]
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert "locked" not in err
    acknowledged = [
        tuple(map(int, line.split())) for out, _ in outputs for line in out.splitlines()
    ]
    assert len(acknowledged) == 600
    log = _audit(db)
    positions = [p for first, last in acknowledged for p in range(first, last + 1)]
    assert sorted(positions) == list(range(1, log.head() + 1))  # no gap, no duplicate
    log.close()


@pytest.mark.crash
@pytest.mark.slow
def test_log_sigkill_mid_append_loses_no_acknowledged_event(tmp_path: Path) -> None:
    rng = random.Random(2026)
    db = tmp_path / "crash.db"
    open_log(db, MACHINES).close()
    deadline = time.monotonic() + 120
    trials = 0
    while trials < 20 and time.monotonic() < deadline:
        child = _writer(db, f"k{trials}", 0)
        time.sleep(rng.uniform(0.02, 0.3))
        child.send_signal(signal.SIGKILL)
        out, _ = _finish(child, 30)
        # Only whole lines count: a kill can cut the last one short mid-write.
        acked = [tuple(map(int, line.split())) for line in out.split("\n")[:-1]]
        log = _audit(db)
        head = log.head()
        for _first, last in acked:
            assert last <= head, f"acknowledged position {last} lost (head {head})"
        batches: dict[str, int] = {}
        for event in log.iter_all():
            key = getattr(event.event, "text", "") or getattr(event.event, "title", "")
            batches[key] = batches.get(key, 0) + 1
        partial = {k: n for k, n in batches.items() if int(k.rsplit("/", 1)[1]) != n}
        assert not partial, f"partial batches after SIGKILL: {partial}"
        log.close()
        trials += 1
    assert trials >= 20
    assert batches  # the children did append before being killed


@pytest.mark.crash
def test_notifier_wakes_a_waiter_for_a_commit_by_another_process(tmp_path: Path) -> None:
    db = tmp_path / "wake.db"
    log = open_log(db, MACHINES)
    notifier = open_notifier(log, interval=0.005)
    try:
        woken: list[float] = []

        def wait() -> None:  # waits from before the other process even starts
            if log.wait_for(0, timeout=30):
                woken.append(time.monotonic())

        waiter = threading.Thread(target=wait)
        waiter.start()
        child = _writer(db, "x", 1)
        assert child.stdout is not None
        assert child.stdout.readline().split()  # printed only after its commit returned
        committed = time.monotonic()
        waiter.join(timeout=30)
        # woken by the commit: within a second of it (the notifier polls every 5 ms), far
        # inside the 30 s timeout
        assert woken and woken[0] - committed < 1.0
        _finish(child, 30)
        assert child.returncode == 0
    finally:
        notifier.stop()
        log.close()


@pytest.mark.crash
def test_log_connection_is_reopened_in_a_forked_child(tmp_path: Path) -> None:
    log = open_log(tmp_path / "fork.db", MACHINES)
    log.append("ticket:parent", 0, [TicketOpened()])
    parent_conn = log.connection()
    pid = os.fork()
    if pid == 0:  # child: must not reuse the parent's connection
        code = 0
        try:
            if log.connection() is parent_conn:
                code = 2
            log.append("ticket:child", 0, [TicketOpened()])
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert log.connection() is parent_conn
    assert [e.stream_id for e in log.read_all()] == ["ticket:parent", "ticket:child"]
    assert log.verify_chain() == []
    log.close()
