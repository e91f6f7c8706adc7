"""diff reads the rows after the fork in chunks of positions and groups them in runs of one
stream: however the rows fall into chunks, the report is the same, and equals one computed
from the rows of both files directly."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import pytest

from engine import FixedClock
from engine.audit import diff, grouping
from tests.cli.test_audit import TAMPERING, forge_chain, make_log, tamper

CHUNKS = (1, 2, 3, 5)  # one row a chunk, runs cut at chunk ends, streams across chunks


def _report(a: Path, b: Path) -> dict[str, Any]:
    found = diff(a, b)
    return {
        "common_prefix": found.common_prefix,
        "only_a": found.only_a,
        "only_b": found.only_b,
        "changed": found.changed,
        "moved": found.moved,
        "entities": found.entities,
        "broken": found.broken_sides(),
    }


def _in_chunks(monkeypatch: pytest.MonkeyPatch, a: Path, b: Path) -> None:
    """The report of one chunk equals the report in chunks of every size, both ways."""
    whole = _report(a, b), _report(b, a)
    for size in CHUNKS:
        monkeypatch.setattr(grouping, "CHUNK", size)
        assert (_report(a, b), _report(b, a)) == whole, size


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_audit_diff_in_chunks_reports_every_tampering_alike(
    clean: Path, tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements, forged, _, shown = TAMPERING[case]
    tampered = tmp_path / "tampered.db"
    shutil.copy(clean, tampered)
    (forge_chain if forged else tamper)(tampered, *statements)
    assert _report(clean, tampered)["common_prefix"] == shown["common_prefix"]
    _in_chunks(monkeypatch, clean, tampered)


def _rows(path: Path) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_READONLY
    )
    try:
        return conn.execute("SELECT stream_id, version FROM events ORDER BY position").fetchall()
    finally:
        conn.close()


def test_audit_diff_in_chunks_of_logs_whose_every_row_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two logs written at other times (every recorded time differs), streams interleaved."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    make_log(a, sessions=4)
    make_log(b, sessions=4, clock=FixedClock(datetime(2026, 6, 1, tzinfo=UTC)))
    expected: dict[str, list[int]] = {}
    for stream_id, version in _rows(a):
        expected.setdefault(stream_id, []).append(version)
    assert len({stream_id for stream_id, _ in _rows(a)[:8]}) > 2  # interleaved
    report = _report(a, b)
    assert report["common_prefix"] == 0
    assert report["changed"] == dict(sorted(expected.items()))
    assert report["only_a"] == report["only_b"] == report["moved"] == {}
    _in_chunks(monkeypatch, a, b)


@pytest.mark.parametrize(
    "edit, only_b",
    [
        # A BLOB is what SQLite's JSON functions read as JSONB (x'02' is JSON false): such
        # rows are read one by one, and values that do not compare with the others are sorted
        # by type.
        ("UPDATE events SET version = x'02' WHERE position = 5", {"job:j0": [b"\x02"]}),
        ("UPDATE events SET stream_id = x'02' WHERE position = 5", {b"\x02": [2]}),
        ("UPDATE events SET version = 2.5 WHERE position = 5", {"job:j0": [2.5]}),
        ("UPDATE events SET version = 'x' WHERE position = 6", {"job:j0": ["x"]}),
    ],
)
def test_audit_diff_of_rows_of_tampered_types(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str, only_b: Any
) -> None:
    tampered = tmp_path / "tampered.db"
    shutil.copy(clean, tampered)
    tamper(tampered, edit)
    report = _report(clean, tampered)
    assert report["only_b"] == only_b and report["broken"] == ["b"]
    _in_chunks(monkeypatch, clean, tampered)


def _swap(first: int, second: int) -> list[str]:
    return [
        f"UPDATE events SET position = -1 WHERE position = {first}",
        f"UPDATE events SET position = {first} WHERE position = {second}",
        f"UPDATE events SET position = {second} WHERE position = -1",
    ]


def test_audit_diff_sorts_a_stream_whose_rows_were_swapped_far_apart(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """session:s0's versions 3 and 5 trade places, with job:j1's swapped pair between them:
    seen from the tampered log, s0's moved rows come as two runs, the later version first."""
    tampered = tmp_path / "tampered.db"
    shutil.copy(clean, tampered)
    tamper(tampered, *_swap(3, 22), *_swap(11, 12))
    moved = {"job:j1": [1, 2], "session:s0": [3, 5]}
    assert _report(clean, tampered)["moved"] == _report(tampered, clean)["moved"] == moved
    _in_chunks(monkeypatch, clean, tampered)
