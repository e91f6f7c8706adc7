"""The audit commands on a PostgreSQL log, ``foldline copy`` between backends, and ``diff``
across them: a PostgreSQL log and its SQLite copy are the same log."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path
from typing import Any

from adapters.cli import main
from adapters.settings.log_sources import reading
from engine import FixedClock
from engine.domain import commands as c
from engine.merkle.nodes import extend_tree
from projections import open_engine
from tests.cli.test_audit import make_log
from tests.support.postgres import session_cluster


def foldline(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in this process (a Python start per call would triple the test's time); the
    subprocess runs of every command are ``tests/cli/test_audit.py``'s, on files."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
        out.flush()
    text = out.buffer.getvalue().decode()  # type: ignore[attr-defined]
    return subprocess.CompletedProcess(list(args), code, text, err.getvalue())


def _raw_outputs(db: str) -> dict[str, str]:
    return {
        "history": foldline("history", db, "job:j1").stdout,
        "state": foldline("state", db, "--at", "9").stdout,
        "export": foldline("export", db).stdout,
        "tail": foldline("tail", db, "--lines", "3").stdout,
        "checkpoint": foldline("checkpoint", db).stdout,
    }


def test_audit_postgres_log_and_its_sqlite_copy_are_one_log(tmp_path: Path) -> None:
    url = session_cluster().url_for(tmp_path)
    make_log(url)  # type: ignore[arg-type]  # open_engine takes a URL as well as a path
    copy = tmp_path / "copy.db"

    done = foldline("copy", url, str(copy))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["events"] == 23 and report["chain_ok"] is True
    assert (
        report["tables"]["jobs"] == 3 and report["tables"]["streams"] == 7
    )  # 3 sessions, 3 jobs, 1 task

    same = foldline("diff", url, str(copy), "--json")
    assert same.returncode == 0 and json.loads(same.stdout)["identical"] is True
    for db in (url, str(copy)):
        verified = foldline("verify", db)
        assert verified.returncode == 0, verified.stdout
        assert json.loads(verified.stdout)["ok"] is True
    assert _raw_outputs(url) == _raw_outputs(str(copy))
    assert len(_raw_outputs(url)["export"].splitlines()) == 23


def test_audit_copy_from_sqlite_to_postgres_goes_on_appending(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    make_log(source)
    url = session_cluster().url_for(tmp_path)
    done = foldline("copy", str(source), url)
    assert done.returncode == 0, done.stderr
    assert foldline("diff", str(source), url).stdout.startswith("identical: 23 events")

    engine = open_engine(url, clock=FixedClock())  # the head row carries the copied tail
    engine.handle(c.AcceptJob(job_id="after", session_id="s1"))
    assert [e.position for e in engine.log.read_all(22)][:2] == [23, 24]  # no gap, no reuse
    assert engine.log.read_stream("job:after")[0].position >= 24
    assert engine.log.verify_chain() == []
    assert engine.log.content_hash() == engine.log.rebuild()
    engine.log.close()
    parted = foldline("diff", str(source), url, "--json")
    assert parted.returncode == 1
    assert json.loads(parted.stdout)["common_prefix"] == 23
    assert "job:after" in json.loads(parted.stdout)["only_b"]


def test_audit_copy_refuses_a_target_that_holds_a_log(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    make_log(source)
    url = session_cluster().url_for(tmp_path)
    assert foldline("copy", str(source), url).returncode == 0
    again = foldline("copy", str(source), url)
    assert again.returncode == 2 and "must be a new or empty log" in again.stderr
    assert foldline("diff", str(source), url).returncode == 0  # untouched


def test_audit_of_a_schema_without_a_log_is_a_clear_error(tmp_path: Path) -> None:
    url = session_cluster().url_for(tmp_path)
    for args in (("verify", url), ("history", url, "job:x"), ("copy", url, str(tmp_path / "x.db"))):
        done = foldline(*args)
        assert done.returncode == 2 and "not_a_log" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_audit_postgres_verify_checks_the_stored_tree_nodes(tmp_path: Path) -> None:
    """verify reads a PostgreSQL log through a copy, which carries the tree nodes along, so
    an edited node is found there as in a file."""
    url = session_cluster().url_for(tmp_path)
    make_log(url, sessions=60)  # type: ignore[arg-type]
    engine = open_engine(url, clock=FixedClock())
    try:
        assert extend_tree(engine.log) > 0
        assert json.loads(foldline("verify", url).stdout)["ok"]
        engine.log.write(
            lambda tx: tx.cursor.execute(
                "UPDATE tree_nodes SET hash = ? WHERE level = 8 AND idx = 0", (b"\0" * 32,)
            )
        )
    finally:
        engine.log.close()
    done = foldline("verify", url)
    assert done.returncode == 1
    assert [v["kind"] for v in json.loads(done.stdout)["violations"]] == ["tree_node_mismatch"]


def test_audit_postgres_log_of_the_previous_schema_is_verified_and_copied(tmp_path: Path) -> None:
    """A PostgreSQL log no server has migrated to schema 2 yet (no ``tree_nodes``): verify,
    ``--since`` and copy read it as it is, and the copy simply has no nodes."""
    url = session_cluster().url_for(tmp_path)
    make_log(url, sessions=60)  # type: ignore[arg-type]
    engine = open_engine(url, clock=FixedClock())
    try:
        checkpoint = tmp_path / "checkpoint.txt"
        checkpoint.write_text(foldline("checkpoint", url, "--origin", "audit.example/pg").stdout)

        def to_schema_1(tx: Any) -> None:
            tx.cursor.execute("DROP TABLE tree_nodes")
            tx.cursor.execute("DELETE FROM schema_migrations WHERE number = 2")

        engine.log.write(to_schema_1)
    finally:
        engine.log.close()
    verified = foldline("verify", url)
    assert verified.returncode == 0 and json.loads(verified.stdout)["ok"], verified.stderr
    since = foldline("verify", url, "--since", str(checkpoint))
    assert since.returncode == 0 and json.loads(since.stdout)["ok"], since.stderr
    copy = tmp_path / "copy.db"
    copied = foldline("copy", url, str(copy))
    assert copied.returncode == 0 and json.loads(copied.stdout)["chain_ok"], copied.stderr
    with reading(str(copy)) as reader:
        assert reader.schema == 2
        assert next(iter(reader.rows("SELECT count(*) FROM tree_nodes", ())))[0] == 0
    assert json.loads(foldline("verify", str(copy)).stdout)["ok"]
