"""``foldline backup --follow`` and ``foldline restore`` with real processes: a writer appends
under load, the backup follows it, both are SIGKILLed and started again, and a restore to a
position verifies. A source whose shipped history is rewritten is refused."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.audit.source import reading
from tests.cli.test_audit import forge_chain, make_log
from tests.crash.test_processes import _writer
from tests.support.cli import ROOT, foldline

TICKETS = "tests.support.tickets:MACHINES"


class Backup:
    """A ``foldline backup --follow`` child whose batch lines are read by a thread."""

    def __init__(self, db: Path, dest: Path) -> None:
        self.child = subprocess.Popen(
            [sys.executable, "-m", "adapters.cli", "backup", str(db), str(dest), "--follow",
             "--interval", "0.05"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: queue.Queue[dict[str, object]] = queue.Queue()
        self.batches: list[dict[str, object]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            self.lines.put(json.loads(line))

    def until(self, last: int, timeout: float = 60) -> None:
        """Wait for a shipped batch that reaches ``last`` (bounded by ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                batch = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.batches.append(batch)
            if int(batch["last"]) >= last:  # type: ignore[call-overload]
                return
        raise AssertionError(f"the backup did not reach {last}: {self.batches[-3:]}")


def _acknowledged(writer: subprocess.Popen[str], count: int) -> int:
    """Read ``count`` acknowledged appends of the writer; the last position acknowledged."""
    assert writer.stdout is not None
    last = 0
    for _ in range(count):
        last = int(writer.stdout.readline().split()[1])
    return last


def _reap(child: subprocess.Popen[str]) -> None:
    """Kill ``child`` if it still runs, wait for it and close its pipes."""
    if child.poll() is None:
        child.kill()
    child.wait(timeout=30)
    for stream in (child.stdout, child.stderr):
        if stream is not None:
            stream.close()


def _head(db: Path) -> int:
    with reading(db) as reader:
        return reader.head()


@pytest.mark.crash
@pytest.mark.slow
def test_backup_follows_a_log_under_load_survives_kills_and_restores_to_a_position(
    tmp_path: Path,
) -> None:
    db, dest = tmp_path / "live.db", tmp_path / "replica"
    writer = _writer(db, "a", 0)
    backup = Backup(db, dest)
    children = [writer, backup.child]
    try:
        backup.until(_acknowledged(writer, 300))
        backup.child.send_signal(signal.SIGKILL)  # the backup dies mid-follow...
        backup.child.wait(timeout=30)
        middle = _acknowledged(writer, 300)
        batches = backup.batches
        backup = Backup(db, dest)  # ...and resumes from the replica's last batch
        backup.batches = batches
        children.append(backup.child)
        backup.until(middle)
        writer.send_signal(signal.SIGKILL)  # the source's writer dies too
        writer.wait(timeout=30)
        writer = _writer(db, "b", 200)
        children.append(writer)
        assert writer.wait(timeout=120) == 0
        backup.until(_head(db))
        backup.child.send_signal(signal.SIGTERM)
        assert backup.child.wait(timeout=30) == 0
    finally:
        for child in children:
            _reap(child)
    # Nothing shipped twice or skipped across both kills: the replica's rows are the source's,
    # byte for byte (a batch line printed by the killed backup may be lost after its commit,
    # so the lines alone cannot say it).
    with reading(db) as a, reading(dest / "replica.db") as b:
        sql = "SELECT * FROM events ORDER BY position"
        assert a.query(sql, ()) == b.query(sql, ())
    lags = [float(b["lag_seconds"]) for b in backup.batches]  # type: ignore[arg-type]
    assert max(lags) < 30, lags  # bounded: caught up within each poll under this load
    ordered = sorted(lags)
    print(
        f"backup: {len(lags)} batches, {_head(db)} events, lag median {ordered[len(lags) // 2]:.3f}"
        f" s, max {ordered[-1]:.3f} s"
    )

    restored = tmp_path / "restored.db"
    done = foldline("restore", str(dest), str(restored), "--to-position", str(middle),
                    "--machines", TICKETS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["events"] == middle
    verified = foldline("verify", str(restored), "--machines", TICKETS)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["events"] == middle
    print(f"restore to position {middle}: {done.stderr.strip()}; verify: {verified.stdout!r}")
    # The restored rows are the source's rows, byte for byte.
    with reading(db) as a, reading(restored) as b:
        sql = "SELECT * FROM events WHERE position <= ? ORDER BY position"
        assert a.query(sql, (middle,)) == b.query(sql, (middle,))
    again = foldline("restore", str(dest), str(restored), "--machines", TICKETS)
    assert again.returncode == 2 and "exists" in again.stderr


def test_backup_refuses_a_source_whose_shipped_history_was_rewritten(
    tmp_path: Path, clean: Path
) -> None:
    dest = tmp_path / "replica"
    first = foldline("backup", str(clean), str(dest))
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[-1])["last"] == 23
    other = tmp_path / "other.db"
    make_log(other, sessions=4)  # another log, longer: its first 23 events are not these
    refused = foldline("backup", str(other), str(dest))
    assert refused.returncode == 1, refused.stderr
    assert "do not have the replica's tree head" in refused.stderr
    # A forger who rewrites an old row and every hash after it is found just the same.
    forge_chain(clean, "UPDATE events SET recorded_at = '2020-01-01T00:00:00.000000Z'"
                       " WHERE position = 5")  # fmt: skip
    assert foldline("backup", str(clean), str(dest)).returncode == 1
    with reading(dest / "replica.db") as replica:
        assert replica.head() == 23  # nothing of the refused runs was kept


def test_restore_to_a_time_and_a_bound_that_splits_nothing(tmp_path: Path, clean: Path) -> None:
    dest = tmp_path / "replica"
    assert foldline("backup", str(clean), str(dest)).returncode == 0
    with reading(clean) as reader:
        at = reader.query("SELECT recorded_at FROM events WHERE position = 10")[0][0]
    restored = tmp_path / "to-time.db"
    done = foldline("restore", str(dest), str(restored), "--to-time", at)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["events"] == _last_at(clean, at)
    assert foldline("verify", str(restored)).returncode == 0
    bad = foldline("restore", str(dest), str(tmp_path / "x.db"), "--to-position", "99")
    assert bad.returncode == 2 and "holds 23 events" in bad.stderr


def _last_at(db: Path, at: str) -> int:
    with reading(db) as reader:
        found = reader.query("SELECT max(position) FROM events WHERE recorded_at <= ?", (at,))
        return int(found[0][0])
