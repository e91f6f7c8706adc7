"""The stored interior nodes of the Merkle tree (engine.merkle.nodes): proofs answered from them
equal those of the whole tree held in memory, on both backends, whether the table is empty,
partly filled, holed or full; the extension stores each complete node once; and ``verify``
finds a node that was edited."""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from adapters.settings.log_sources import reading
from engine import Log, merkle, open_log
from engine.audit.source import Reader
from engine.audit.verifier import verify
from engine.errors import InvalidArgument
from engine.merkle.nodes import BLOCK, LOWEST_LEVEL, extend_tree
from engine.merkle.tree import LogTree, StoredTree, open_tree
from engine.storage import copy as log_copy
from tests.support.postgres import session_cluster
from tests.support.tickets import MACHINES, TicketNoted, TicketOpened, TicketTitles

SIZES = (1, 2, 3, 7, 8, 9, 255, 256, 257, 1000, 5000)
EVENTS = 5200
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "logs" / "schema1.db"


def fill(log: Log, upto: int) -> None:
    """Append notes to one ticket until the log holds ``upto`` events, 500 per commit."""
    head = log.head()
    if head == 0:
        log.append("ticket:t", 0, [TicketOpened(title="t")])
        head = 1
    while head < upto:
        count = min(500, upto - head)
        log.append("ticket:t", head, [TicketNoted(text=str(head + i)) for i in range(count)])
        head += count


def chain_hashes(reader: Reader) -> list[bytes]:
    return [bytes(h) for (h,) in reader.rows("SELECT hash FROM events ORDER BY position", ())]


def assert_same_proofs(reader: Reader, seed: int) -> None:
    """At every chosen size: the head, inclusion proofs and consistency proofs of a fresh
    stored tree equal those of the in-memory tree over the same chain hashes."""
    data = chain_hashes(reader)
    whole = LogTree(data)
    chosen = random.Random(seed)
    sizes = [
        *(s for s in SIZES if s <= len(data)),
        *(chosen.randint(1, len(data)) for _ in range(4)),
    ]
    for size in sizes:
        tree = open_tree(reader, size)
        assert isinstance(tree, StoredTree)
        assert tree.root() == whole.root(size), size
        indexes = {0, size - 1, size // 2, chosen.randrange(size)}
        for index in indexes:
            assert tree.inclusion(index, size) == whole.inclusion(index, size), (index, size)
            assert tree.leaf_hash(index) == whole.leaf_hash(index)
        for old in {1, size // 2 or 1, max(size - 1, 1), size, chosen.randint(1, size)}:
            assert tree.consistency(old, size) == whole.consistency(old, size), (old, size)
            assert tree.root(old) == whole.root(old)


def stored_count(reader: Reader) -> int:
    return int(next(iter(reader.rows("SELECT count(*) FROM tree_nodes", ())))[0])


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "log.db")
    return session_cluster().url_for(tmp_path)


def test_tree_nodes_proofs_equal_the_in_memory_tree_empty_partial_and_full(target: str) -> None:
    log = open_log(target, MACHINES, [TicketTitles()])
    try:
        fill(log, 3000)
        assert extend_tree(log) > 0  # 11 blocks stored, then the log grows past them
        fill(log, EVENTS)
        with reading(target) as reader:
            assert_same_proofs(reader, seed=1)  # stored below 2816, hashed above
        log.write(lambda tx: tx.cursor.execute("DELETE FROM tree_nodes"))
        with reading(target) as reader:
            assert stored_count(reader) == 0
            assert_same_proofs(reader, seed=2)  # nothing stored: everything hashed
        extend_tree(log)
        with reading(target) as reader:
            assert_same_proofs(reader, seed=3)  # everything complete stored
    finally:
        log.close()


def test_tree_nodes_extension_stores_each_complete_node_once(tmp_path: Path) -> None:
    log = open_log(tmp_path / "log.db", MACHINES, [TicketTitles()])
    try:
        fill(log, BLOCK - 1)
        assert extend_tree(log) == 0  # no complete block yet
        fill(log, 7 * BLOCK + 3)
        first = extend_tree(log)
        fill(log, EVENTS)
        second = extend_tree(log)
        assert extend_tree(log) == 0  # nothing new: nothing written
        head = log.head()
        expected = {
            (level, idx)
            for level in range(LOWEST_LEVEL, head.bit_length())
            for idx in range(head >> level)
        }
        rows = log.connection().execute("SELECT level, idx, hash FROM tree_nodes").fetchall()
        assert {(level, idx) for level, idx, _ in rows} == expected
        assert first + second == len(expected)
        data = [bytes(h) for (h,) in log.connection().execute("SELECT hash FROM events")]
        whole = LogTree(data)
        for level, idx, digest in rows:
            assert bytes(digest) == whole.subtree(idx << level, (idx + 1) << level)
    finally:
        log.close()


def test_tree_nodes_with_a_hole_are_filled_in_from_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = open_log(path, MACHINES, [TicketTitles()])
    fill(log, EVENTS)
    extend_tree(log)
    log.close()
    conn = apsw.Connection(str(path))
    conn.execute("DELETE FROM tree_nodes WHERE (level, idx) IN ((8, 3), (10, 1), (12, 0))")
    conn.close()
    with reading(str(path)) as reader:
        assert_same_proofs(reader, seed=4)


def test_tree_nodes_absent_from_an_older_log_cost_only_speed(tmp_path: Path) -> None:
    """A log of schema 1 (no table at all) still proves, from its chain hashes alone."""
    path = tmp_path / "schema1.db"
    shutil.copy(GOLDEN, path)
    with reading(str(path)) as reader:
        assert reader.schema == 1
        data = chain_hashes(reader)
        tree = open_tree(reader)
        assert tree.root() == merkle.root([merkle.leaf_hash(d) for d in data])
        assert tree.inclusion(3, tree.size) == LogTree(data).inclusion(3, tree.size)


def test_tree_nodes_stored_tree_refuses_a_leaf_outside_it(tmp_path: Path) -> None:
    log = open_log(tmp_path / "log.db", MACHINES, [TicketTitles()])
    fill(log, 10)
    log.close()
    with reading(str(tmp_path / "log.db")) as reader:
        tree = open_tree(reader, 5)
        with pytest.raises(InvalidArgument, match="leaf 5 is not in a tree of 5"):
            tree.leaf_hash(5)
        with pytest.raises(InvalidArgument, match="size 6"):
            tree.inclusion(0, 6)


@pytest.fixture
def extended(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "log.db"
    log = open_log(path, MACHINES, [TicketTitles()])
    fill(log, 3 * BLOCK + 10)
    extend_tree(log)
    log.close()
    yield path


def test_tree_nodes_verify_passes_them_and_finds_an_edited_one(extended: Path) -> None:
    assert verify(extended, MACHINES, [TicketTitles()]).ok
    conn = apsw.Connection(str(extended))
    conn.execute("UPDATE tree_nodes SET hash = zeroblob(32) WHERE level = 8 AND idx = 1")
    conn.close()
    report = verify(extended, MACHINES, [TicketTitles()])
    assert [(v.position, v.kind) for v in report.violations] == [(257, "tree_node_mismatch")]
    assert report.violations[0].detail == (
        "stored tree node (level 8, index 1) over positions 257..512 differs from the head of"
        " their chain hashes"
    )


def test_tree_nodes_verify_finds_a_node_the_log_cannot_hold(extended: Path) -> None:
    conn = apsw.Connection(str(extended))
    conn.execute("INSERT INTO tree_nodes VALUES (8, 3, zeroblob(32)), (9, 1, zeroblob(32))")
    conn.close()
    report = verify(extended, MACHINES, [TicketTitles()])
    assert [(v.position, v.kind) for v in report.violations] == [
        (513, "tree_node_unknown"),
        (769, "tree_node_unknown"),
    ]
    assert "is not a complete node of the log's 778 events" in report.violations[0].detail


def test_tree_nodes_verify_finds_an_edit_hidden_behind_a_row_of_another_type(
    extended: Path,
) -> None:
    """SQLite keeps a written 1.5 as it is: a row (8, 1.5) holding node (8, 1)'s true hash must
    not stand in for the edited (8, 1), which the proofs read."""
    conn = apsw.Connection(str(extended))
    (good,) = conn.execute("SELECT hash FROM tree_nodes WHERE level = 8 AND idx = 1").fetchone()
    conn.execute("UPDATE tree_nodes SET hash = zeroblob(32) WHERE level = 8 AND idx = 1")
    conn.execute("INSERT INTO tree_nodes VALUES (8, 1.5, ?)", (good,))
    conn.close()
    report = verify(extended, MACHINES, [TicketTitles()])
    assert [(v.position, v.kind) for v in report.violations] == [
        (1, "tree_node_unknown"),
        (257, "tree_node_mismatch"),
    ]
    assert "(level 8, index 1.5, hash of bytes) is not a node" in report.violations[0].detail


@pytest.mark.parametrize(
    ("edit", "at"),
    [
        ("INSERT INTO tree_nodes VALUES (-1, 0, zeroblob(32))", 1),
        ("INSERT INTO tree_nodes VALUES (7, 0, zeroblob(32))", 1),
        ("INSERT INTO tree_nodes VALUES ('eight', 0, zeroblob(32))", 1),
        ("UPDATE tree_nodes SET hash = 'not a blob' WHERE level = 8 AND idx = 1", 257),
        ("UPDATE tree_nodes SET hash = zeroblob(31) WHERE level = 8 AND idx = 1", 257),
    ],
)
def test_tree_nodes_verify_reports_a_malformed_row_and_proofs_ignore_it(
    extended: Path, edit: str, at: int
) -> None:
    conn = apsw.Connection(str(extended))
    conn.execute(edit)
    conn.close()
    report = verify(extended, MACHINES, [TicketTitles()])  # a finding, never a crash
    assert [(v.position, v.kind) for v in report.violations] == [(at, "tree_node_unknown")]
    with reading(str(extended)) as reader:  # what is not a hash is computed instead
        assert_same_proofs(reader, seed=5)


def test_tree_nodes_copy_of_a_live_log_is_one_snapshot(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server appending and extending the nodes while ``copy`` reads (here: between its
    events and the rest) changes nothing the copy holds: it verifies whole."""
    live = open_log(target, MACHINES, [TicketTitles()])
    fill(live, 2 * BLOCK + 10)
    extend_tree(live)
    events = log_copy._events

    def events_then_the_server_works(read: Any) -> Iterator[list[Any]]:
        yield from events(read)
        fill(live, 4 * BLOCK + 3)
        assert extend_tree(live) > 0

    monkeypatch.setattr(log_copy, "_events", events_then_the_server_works)
    try:
        report = log_copy.copy_log(target, tmp_path / "copy.db")
    finally:
        live.close()
    assert report.events == 2 * BLOCK + 10 and report.chain_ok
    verified = verify(tmp_path / "copy.db", MACHINES, [TicketTitles()])
    assert verified.ok, verified.violations
