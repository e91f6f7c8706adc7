"""What only the PostgreSQL backend has: URLs and schemas, the head row, the dialect, LISTEN.

Everything the two backends share is the contract suite's (``tests/contract``); these run on
the session's embedded cluster (``tests.support.postgres``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine import (
    AppendResult,
    ConcurrencyError,
    InvalidArgument,
    InvalidEvent,
    NotALog,
    SchemaTooNew,
    open_log,
    open_notifier,
)
from engine.log import open_log_readonly
from engine.storage.postgres import arrays as pg_arrays
from engine.storage.postgres.dialect import Dialect
from engine.storage.postgres.schema import LATEST as PG_LATEST
from engine.storage.postgres.storage import PostgresStorage
from engine.storage.postgres.url import redact, split_url
from engine.storage.sqlite.schema import LATEST
from engine.write.batch import run_batch
from engine.write.group_commit import Request
from tests.support.batches import one_batch
from tests.support.postgres import session_cluster, with_schema
from tests.support.tickets import MACHINES, TicketNoted, TicketOpened, TicketTitles

ROOT = Path(__file__).resolve().parents[2]


def test_postgres_url_names_its_schema_and_hides_its_password() -> None:
    conninfo, schema = split_url("postgresql://u:secret@/db?host=/run/pg&schema=ws_1")
    assert (conninfo, schema) == ("postgresql://u:secret@/db?host=%2Frun%2Fpg", "ws_1")
    assert split_url("postgresql://localhost/db")[1] == "foldline"
    assert redact("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"


@pytest.mark.parametrize("schema", ["Upper", "a-b", "x;drop", "", "1abc"])
def test_postgres_url_with_a_schema_that_is_not_a_plain_name_is_refused(schema: str) -> None:
    with pytest.raises(InvalidArgument, match="schema"):
        PostgresStorage(f"postgresql://localhost/db?schema={schema}")


def test_postgres_schema_numbers_match_sqlite() -> None:
    """A log at migration N has the same tables on either backend (audits compare them)."""
    assert PG_LATEST == LATEST


def test_postgres_one_server_holds_separate_logs_per_schema(tmp_path: Path) -> None:
    cluster = session_cluster()
    one = open_log(cluster.url_for(tmp_path / "one"), MACHINES, [TicketTitles()])
    two = open_log(cluster.url_for(tmp_path / "two"), MACHINES, [TicketTitles()])
    one.append("ticket:a", 0, [TicketOpened()])
    assert two.head() == 0 and two.stream_head("ticket:a").version == 0
    assert two.append("ticket:a", 0, [TicketOpened()]).first_position == 1
    one.close()
    two.close()


def test_postgres_head_row_holds_the_tail_and_counts_commits(tmp_path: Path) -> None:
    log = open_log(session_cluster().url_for(tmp_path), MACHINES, [TicketTitles()])
    before = log.data_version()
    last = log.append("ticket:a", 0, [TicketOpened(), TicketNoted()])
    row = log.connection().execute("SELECT position, hash, epoch FROM head").fetchall()
    assert row == [(2, bytes.fromhex(log.read_all()[-1].hash), 0)]
    assert last.last_position == log.head() == 2
    assert log.data_version() == before + 1
    log.close()


def test_postgres_events_are_append_only(tmp_path: Path) -> None:
    log = open_log(session_cluster().url_for(tmp_path), MACHINES)
    log.append("ticket:a", 0, [TicketOpened()])
    with pytest.raises(Exception, match="append-only"):
        log.connection().execute("UPDATE events SET state = 'done'")
    log.close()


def test_postgres_a_schema_holding_other_tables_is_not_a_log(tmp_path: Path) -> None:
    url = session_cluster().url_for(tmp_path)
    storage = PostgresStorage(url)
    storage.writer().conn.execute(
        f"CREATE SCHEMA {storage.schema}; CREATE TABLE {storage.schema}.other (x int)"
    )
    storage.close()
    with pytest.raises(NotALog):
        open_log(url, MACHINES)


def test_postgres_read_only_open_of_a_missing_log_is_not_a_log(tmp_path: Path) -> None:
    with pytest.raises(NotALog):
        open_log_readonly(session_cluster().url_for(tmp_path), MACHINES)


def test_postgres_read_only_open_writes_nothing(tmp_path: Path) -> None:
    url = session_cluster().url_for(tmp_path)
    open_log(url, MACHINES, [TicketTitles()]).close()
    reader = open_log_readonly(url, MACHINES, [TicketTitles()])
    with pytest.raises(Exception, match="read-only"):
        reader.connection().execute("INSERT INTO ticket_titles VALUES ('x', 'y', 0)")
    reader.close()


def test_postgres_listen_wakes_a_waiter_on_another_handle(tmp_path: Path) -> None:
    """A commit through another handle (another host) wakes ``wait_for`` by NOTIFY."""
    url = session_cluster().url_for(tmp_path)
    reader = open_log(url, MACHINES)
    writer = open_log(url, MACHINES)
    notifier = open_notifier(reader)
    assert notifier.listening.wait(10)  # type: ignore[attr-defined]
    woken: list[float] = []

    def wait() -> None:
        started = time.monotonic()
        if reader.wait_for(0, timeout=10):
            woken.append(time.monotonic() - started)

    waiter = threading.Thread(target=wait)
    waiter.start()
    writer.append("ticket:a", 0, [TicketOpened()])
    waiter.join(15)
    notifier.stop()
    assert len(woken) == 1 and woken[0] < 5
    reader.close()
    writer.close()


@pytest.mark.parametrize(
    ("sqlite", "postgres"),
    [
        (
            "SELECT a FROM t WHERE b = ? AND c LIKE 'x?%'",
            "SELECT a FROM t WHERE b = %s AND c LIKE 'x?%%'",
        ),
        (
            "CREATE TABLE t (id TEXT PRIMARY KEY, text TEXT, n INTEGER, b BLOB) WITHOUT ROWID",
            'CREATE TABLE t (id TEXT COLLATE "C" PRIMARY KEY, text TEXT COLLATE "C",'
            " n BIGINT, b BYTEA)",
        ),
        ("INSERT OR IGNORE INTO t VALUES (?)", "INSERT INTO t VALUES (%s) ON CONFLICT DO NOTHING"),
    ],
)
def test_postgres_dialect_translates_sqlite_statements(sqlite: str, postgres: str) -> None:
    bound = "?" in sqlite
    assert Dialect().translate(None, sqlite, bound) == postgres


def test_postgres_dialect_replaces_on_the_primary_key(tmp_path: Path) -> None:
    log = open_log(session_cluster().url_for(tmp_path), MACHINES)
    conn = log.connection()
    conn.execute("CREATE TABLE pairs (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID")
    conn.execute("INSERT OR REPLACE INTO pairs VALUES (?, ?)", ("a", 1))
    conn.execute("INSERT OR REPLACE INTO pairs VALUES (?, ?)", ("a", 2))
    assert conn.execute("SELECT k, v FROM pairs").fetchall() == [("a", 2)]
    assert [r[1] for r in conn.execute("PRAGMA table_info(pairs)").fetchall()] == ["k", "v"]
    log.close()


def test_postgres_unreachable_server_is_a_storage_error(tmp_path: Path) -> None:
    missing = with_schema(f"postgresql://postgres@/postgres?host={tmp_path}", "x")
    with pytest.raises(Exception, match="postgresql"):
        open_log(missing, MACHINES)


def test_postgres_json_functions_give_sqlites_text(tmp_path: Path) -> None:
    """The read models' JSON columns hold the same text on both backends (audits refold a
    PostgreSQL log's copy in SQLite and compare the rows)."""
    sql = (
        "SELECT json_insert(json_insert('[]', '$[#]', json_array(?, ?)), '$[#]', json_array(?, ?))"
    )
    params = ("m1", 'say "hi"\n', "m2", "é")
    sqlite = open_log(tmp_path / "j.db", MACHINES)
    postgres = open_log(session_cluster().url_for(tmp_path), MACHINES)
    expected = sqlite.connection().execute(sql, params).fetchall()
    assert postgres.connection().execute(sql, params).fetchall() == expected
    assert expected == [('[["m1","say \\"hi\\"\\n"],["m2","é"]]',)]
    sqlite.close()
    postgres.close()


def test_postgres_a_writer_frozen_in_its_transaction_does_not_block_the_others(
    tmp_path: Path,
) -> None:
    """A writer stopped while it holds the head row's lock is ended by the server after the
    idle limit: its transaction rolls back and the other writers go on."""
    url = session_cluster().url_for(tmp_path)
    frozen = PostgresStorage(url, idle_in_transaction_s=0.5)
    other = open_log(url, MACHINES)
    frozen.migrate("2026-12-01T00:00:00.000000Z")
    writer = frozen.writer()
    writer.begin()  # ...and then nothing: the head row stays locked
    appended: list[int] = []
    appender = threading.Thread(
        target=lambda: appended.append(
            other.append("ticket:a", 0, [TicketOpened()]).first_position
        ),
        daemon=True,
    )
    appender.start()
    appender.join(30)
    assert appended == [1], "the other writer is still waiting for the frozen one"
    with pytest.raises(Exception, match=r"idle|terminat|closed"):
        writer.commit()
    assert other.head() == 1
    frozen.close()
    other.close()


def test_postgres_log_of_a_newer_release_is_refused_untouched(tmp_path: Path) -> None:
    url = session_cluster().url_for(tmp_path)
    open_log(url, MACHINES).close()
    storage = PostgresStorage(url)
    storage.connection().execute(
        "INSERT INTO schema_migrations VALUES (?, ?, ?)", (LATEST + 1, "from the future", "-")
    )
    storage.close()
    with pytest.raises(SchemaTooNew):
        open_log(url, MACHINES)
    reader = PostgresStorage(url, readonly=True)
    assert reader.applied() == LATEST + 1
    reader.close()


def test_postgres_url_without_the_extra_is_a_clear_error(tmp_path: Path) -> None:
    """Without psycopg installed, a PostgreSQL URL says which extra to install."""
    script = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from engine import open_log, EngineError\n"
        "from tests.support.tickets import MACHINES\n"
        "try:\n"
        "    open_log('postgresql://localhost/db?schema=x', MACHINES)\n"
        "except EngineError as ex:\n"
        "    print(ex.code, ex)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("invalid_argument") and "foldline[postgres]" in done.stdout


def test_postgres_nul_in_a_read_models_text_is_a_clear_refusal_that_appends_nothing(
    tmp_path: Path,
) -> None:
    # PostgreSQL text cannot hold U+0000 (SQLite's can): the event is refused as invalid, the
    # log is left as it was, and the next append goes on.
    log = open_log(session_cluster().url_for(tmp_path), MACHINES, [TicketTitles()])
    with pytest.raises(InvalidEvent, match="NUL"):
        log.append("ticket:a", 0, [TicketOpened(title="a\x00b")])
    assert log.head() == 0 and log.read_all() == []
    assert log.append("ticket:a", 0, [TicketOpened(title="ab")]).last_position == 1
    log.close()


def test_postgres_a_shared_batch_reads_its_streams_heads_in_one_query(tmp_path: Path) -> None:
    """Each lookup is a round trip here: a batch of appends to streams this handle has not
    seen asks for all their heads at once (white-box: the writer's lookups are counted)."""
    url = session_cluster().url_for(tmp_path)
    first = open_log(url, MACHINES)
    second = open_log(url, MACHINES)
    first.append("ticket:seen", 0, [TicketOpened()])
    for i in range(16):
        second.append(f"ticket:{i}", 0, [TicketOpened()])
    writer: Any = first.storage.writer()
    asked: list[list[str]] = []
    one_by_one: list[str] = []
    many, one = writer.stream_heads, writer.stream_head

    def counted_many(ids: list[str]) -> Any:
        asked.append(list(ids))
        return many(ids)

    def counted_one(stream_id: str) -> Any:
        one_by_one.append(stream_id)
        return one(stream_id)

    writer.stream_heads, writer.stream_head = counted_many, counted_one
    outcomes = one_batch(first, [(f"ticket:{i}", 1, TicketNoted()) for i in range(16)])
    assert [o.last_version for o in outcomes] == [2] * 16
    assert asked == [sorted(f"ticket:{i}" for i in range(16))] and one_by_one == []
    first.close()
    second.close()


AWKWARD = ["", "NULL", "null", 'a"b', "a\\b", '\\"', "{a,b}", " x ", "a,b", "\n\t", "é€😀", "}"]


def test_postgres_array_literals_carry_any_value_unchanged(tmp_path: Path) -> None:
    """The batch's columns are sent as array literals built by hand: quotes, backslashes,
    braces, commas, the word NULL and empty values come back as they went."""
    log = open_log(session_cluster().url_for(tmp_path), MACHINES)
    conn = log.connection()
    # Each kind of column: awkward values, plain ones (joined whole), all NULL, none at all.
    text_columns: list[list[str | None]] = [
        [*AWKWARD, None],
        ["item:a", "2026-12-01T00:00:00Z", " x "],
        [None, None],
        [],
    ]
    for texts in text_columns:
        got = conn.execute("SELECT CAST(? AS text[])", (pg_arrays.texts(texts),)).fetchall()
        assert got[0][0] == texts
    bytea_columns: list[list[bytes | None]] = [
        [b"", b'\x00\xff\\"{},', b"NULL", None],
        [b"", b"\x01{"],
        [],
    ]
    for byteas in bytea_columns:
        got = conn.execute("SELECT CAST(? AS bytea[])", (pg_arrays.byteas(byteas),)).fetchall()
        assert [None if b is None else bytes(b) for b in got[0][0]] == byteas
    ints = [0, -1, 2**63 - 1, -(2**63)]
    got = conn.execute("SELECT CAST(? AS bigint[])", (pg_arrays.bigints(ints),)).fetchall()
    assert got[0][0] == ints
    log.close()


def test_postgres_a_batch_stores_awkward_command_ids_exactly(tmp_path: Path) -> None:
    """The events' text columns go through the literals: each command id is stored as given
    (the chain, which hashes it, verifies; a repeat is known as a duplicate)."""
    log = open_log(session_cluster().url_for(tmp_path), MACHINES)
    appends = [(f"ticket:{i}", 0, TicketOpened(title=AWKWARD[i])) for i in range(len(AWKWARD))]
    commands = {i: f"cmd{i}:{text}" for i, text in enumerate(AWKWARD)}
    one_batch(log, appends, commands)
    assert log.verify_chain() == []
    events = {e.stream_id: e for e in log.read_all()}
    for i, text in enumerate(AWKWARD):
        event: Any = events[f"ticket:{i}"]
        assert (event.command_id, event.event.title) == (commands[i], text)
    again = log.append("ticket:1", 0, [TicketOpened()], command_id=commands[1])
    assert again.duplicate and again.first_position == events["ticket:1"].position
    log.close()


def _count_lookups(log: Any) -> list[str]:
    """Every stream whose head the log's writer reads from the server, in order (white-box)."""
    writer: Any = log.storage.writer()
    looked: list[str] = []
    many, one = writer.stream_heads, writer.stream_head

    def counted_many(ids: list[str]) -> Any:
        looked.extend(ids)
        return many(ids)

    def counted_one(stream_id: str) -> Any:
        looked.append(stream_id)
        return one(stream_id)

    writer.stream_heads, writer.stream_head = counted_many, counted_one
    return looked


def test_postgres_a_shared_batch_of_creates_reads_no_heads(tmp_path: Path) -> None:
    """Appends at expected version 0 say their streams are new: a batch of them only is
    taken at its word, without a round trip for heads nobody here has seen."""
    log = open_log(session_cluster().url_for(tmp_path), MACHINES)
    looked = _count_lookups(log)
    outcomes = one_batch(log, [(f"ticket:{i}", 0, TicketOpened()) for i in range(16)])
    assert [o.last_version for o in outcomes] == [1] * 16
    assert looked == []
    assert log.verify_chain() == []
    log.close()


def test_postgres_a_create_of_a_stream_another_writer_made_is_refused_alone(
    tmp_path: Path,
) -> None:
    """A stream taken as new that another writer has created: the batch's commit collides on
    UNIQUE (stream_id, version), and the batch runs again reading the heads, so only that
    append fails, with the error it would have had, and the rest commit once."""
    url = session_cluster().url_for(tmp_path)
    first = open_log(url, MACHINES)
    second = open_log(url, MACHINES)
    first.append("ticket:seen", 0, [TicketOpened()])  # the writer's cache is now valid
    second.append("ticket:3", 0, [TicketOpened(title="theirs")])
    looked = _count_lookups(first)
    outcomes = one_batch(first, [(f"ticket:{i}", 0, TicketOpened()) for i in range(16)])
    assert isinstance(outcomes[3], ConcurrencyError), outcomes[3]
    assert all(o.last_version == 1 for i, o in enumerate(outcomes) if i != 3), outcomes
    assert "ticket:3" in looked  # the second try read the heads
    assert [e.event.title for e in first.read_stream("ticket:3")] == ["theirs"]  # type: ignore[attr-defined]
    assert first.head() == 2 + 15 and first.verify_chain() == []
    # What the retried batch left behind is true: the next append builds on it.
    assert first.append("ticket:3", 1, [TicketNoted()]).last_version == 2
    assert first.append("ticket:4", 1, [TicketNoted()]).last_version == 2
    first.close()
    second.close()


def test_postgres_a_trusted_create_that_fails_alone_gets_the_answer_of_a_read(
    tmp_path: Path,
) -> None:
    """A stream taken as new decides more than the commit's collision: its machine starts in
    the initial state. An event that state refuses (but the stream's real state allows) must
    not come back as that refusal: the stream exists, so the append at version 0 is a
    ``ConcurrencyError``, as it is when the heads are read."""
    url = session_cluster().url_for(tmp_path)
    first = open_log(url, MACHINES)
    second = open_log(url, MACHINES)
    first.append("ticket:seen", 0, [TicketOpened()])  # the writer's cache is now valid
    second.append("ticket:3", 0, [TicketOpened(title="theirs")])
    with pytest.raises(ConcurrencyError):  # what a lone append, which reads, answers
        second.append("ticket:3", 0, [TicketNoted()])
    works = [(f"ticket:{i}", 0, TicketNoted() if i == 3 else TicketOpened()) for i in range(16)]
    outcomes = one_batch(first, works)
    assert isinstance(outcomes[3], ConcurrencyError), outcomes[3]
    assert all(o.last_version == 1 for i, o in enumerate(outcomes) if i != 3), outcomes
    assert first.head() == 2 + 15 and first.verify_chain() == []
    first.close()
    second.close()


def test_postgres_a_batch_with_any_other_work_trusts_nothing(tmp_path: Path) -> None:
    """A work that is not a plain append may have effects of its own, so its batch is never
    run twice: the streams it shares the batch with are read, not taken as new."""
    url = session_cluster().url_for(tmp_path)
    first = open_log(url, MACHINES)
    second = open_log(url, MACHINES)
    second.append("ticket:taken", 0, [TicketOpened()])
    runs: list[int] = []

    def other(tx: Any) -> AppendResult:
        runs.append(1)
        result: AppendResult = tx.append("ticket:mine", 0, [TicketOpened()])
        return result

    def create(stream_id: str) -> Request:
        return Request(lambda tx: tx.append(stream_id, 0, [TicketOpened()]), stream_id, 0)

    batch = [Request(other), create("ticket:taken"), create("ticket:new")]
    run_batch(first.parts, lambda: batch)
    assert runs == [1]
    assert batch[0].error is None and batch[0].result.last_version == 1
    assert isinstance(batch[1].error, ConcurrencyError)
    assert batch[2].error is None and batch[2].result.last_version == 1
    assert first.head() == 3 and first.verify_chain() == []
    first.close()
    second.close()


@pytest.mark.parametrize("broken", ["events", "heads"])
def test_postgres_a_commit_whose_rows_fail_commits_none_of_them(
    tmp_path: Path, broken: str
) -> None:
    """The batch's last rows go with its COMMIT in one pipeline: a row the server refuses,
    an event or a stream head, must leave the log as it was."""
    url = session_cluster().url_for(tmp_path)
    log = open_log(url, MACHINES)
    log.append("ticket:a", 0, [TicketOpened()])
    storage = PostgresStorage(url)
    writer = storage.writer()
    writer.begin()
    position, hash_, epoch = writer.tail()
    row = (position + 1, "ticket:b", 1, "ticket.opened", "t", epoch, None, "open", b"{}", hash_)
    # Two rows of one stream at one version, or a head row without its kind (NOT NULL).
    second = (position + 2, *row[1:]) if broken == "events" else (position + 2, "ticket:c", 1)
    rows = [row, second + row[len(second) :]]
    kind = None if broken == "heads" else "ticket"
    heads = [
        (rows[0][1], "ticket", 1, "open", position + 1, position + 1, "t", "t"),
        ("ticket:c", kind, 1, "open", position + 2, position + 2, "t", "t"),
    ]
    with pytest.raises(Exception, match=r"unique|duplicate|null"):
        writer.commit((rows, heads, []))
    writer.rollback()
    assert log.head() == 1 and log.stream_head("ticket:b").version == 0
    assert log.append("ticket:b", 0, [TicketOpened()]).first_position == 2
    assert log.verify_chain() == []
    storage.close()
    log.close()
