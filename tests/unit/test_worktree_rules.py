"""Writers' worktrees, their patches and the crash-safe integration of a patch (issue 28), one
behaviour per test, through the command API: a writer starts only in a git worktree, finishes
with its patch, and an accepted patch is integrated as an intent the server confirms or undoes,
one at a time."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from engine import InvalidTransition
from engine.domain import commands as c
from engine.domain import job as job_
from engine.domain import pausing
from engine.domain import result as result_
from engine.domain.errors import AdmissionRejected, Conflict, Forbidden
from engine.domain.job import PatchEntry
from engine.domain.rows import Integration, JobRow
from engine.engine import Engine
from projections import queries, rows
from tests.unit.test_rules import refused, session

WT = "/tmp/wt/j1"
BASE = "b" * 40
PATCH = PatchEntry(sha256="a" * 64, size=42, paths=("src/a.py", "src/b.py"), base_commit=BASE)
BEFORE, AFTER = "1" * 40, "2" * 40


def jobrow(engine: Engine, jid: str) -> JobRow:
    found = queries.job(engine.log.connection(), jid)
    assert found is not None
    return found


def writer(engine: Engine, jid: str, scope: str = "src", **start: Any) -> None:
    engine.handle(c.AcceptJob(job_id=jid, session_id="s1", write_scope=(scope,), owed=False))
    engine.handle(c.StartJob(job_id=jid, run_id=f"run-{jid}", worktree=f"/tmp/wt/{jid}", **start))


def accepted(
    engine: Engine, jid: str, scope: str = "src", patch: PatchEntry | None = PATCH
) -> None:
    """A writer's finished job with ``patch``, its result read and accepted by the operator."""
    writer(engine, jid, scope, base_commit=BASE)
    engine.handle(c.FinishJob(job_id=jid, outcome="ok", patch=patch))
    engine.handle(c.ReadJobResult(job_id=jid))
    engine.handle(c.AcceptJobResult(job_id=jid, reason="good"))


def begin(jid: str, sha256: str = PATCH.sha256, **kw: Any) -> c.BeginIntegration:
    return c.BeginIntegration(
        job_id=jid, sha256=sha256, before_tree=BEFORE, after_tree=AFTER, paths=PATCH.paths, **kw
    )


# -- a writer's worktree ----------------------------------------------------------------------


def test_worktree_writer_started_without_one_is_refused_not_git(engine: Engine) -> None:
    session(engine)
    engine.handle(c.AcceptJob(job_id="j1", session_id="s1", write_scope=("src",), owed=False))
    error = refused(engine, c.StartJob(job_id="j1", run_id="r"), AdmissionRejected)
    assert error.fields["reason"] == "writable_target_not_git"
    assert "needs a git worktree" in str(error) and "src" in str(error)
    assert jobrow(engine, "j1").state == "queued"


def test_worktree_is_recorded_by_the_start_and_kept_by_a_resumed_one(engine: Engine) -> None:
    session(engine)
    writer(engine, "j1", base_commit=BASE)
    row = jobrow(engine, "j1")
    assert (row.worktree, row.base_commit) == (WT, BASE)
    engine.handle(pausing.SuspendJob(job_id="j1"))
    engine.handle(c.StartJob(job_id="j1", run_id="r2", resumed=True, worktree=WT))
    row = jobrow(engine, "j1")
    assert (row.state, row.worktree, row.base_commit, row.runs) == ("running", WT, BASE, 2)


def test_worktree_resumed_start_must_name_the_same_worktree(engine: Engine) -> None:
    session(engine)
    writer(engine, "j1", base_commit=BASE)
    engine.handle(pausing.SuspendJob(job_id="j1"))
    again = c.StartJob(job_id="j1", run_id="r2", resumed=True, worktree="/tmp/wt/other")
    assert "resumes in worktree /tmp/wt/j1" in str(refused(engine, again, Conflict))
    other_base = msgspec.structs.replace(again, worktree=WT, base_commit="c" * 40)
    refused(engine, other_base, Conflict)


def test_worktree_is_optional_for_a_job_without_write_scope(engine: Engine) -> None:
    session(engine)
    engine.handle(c.AcceptJob(job_id="j1", session_id="s1", owed=False))
    engine.handle(c.StartJob(job_id="j1", run_id="r"))
    row = jobrow(engine, "j1")
    assert (row.state, row.worktree, row.base_commit, row.patch) == ("running", None, None, None)


def test_worktree_start_fields_are_validated_at_the_edge() -> None:
    decode = msgspec.json.Decoder(c.StartJob).decode
    body = b'{"command": "StartJob", "job_id": "j", "run_id": "r", %s}'
    assert decode(body % b'"worktree": "/abs/wt", "base_commit": "%s"' % (b"f" * 64)).worktree
    for bad in (
        b'"worktree": "relative/wt"',
        b'"worktree": "/%s"' % (b"x" * 4096),
        b'"base_commit": "abc"',
        b'"base_commit": "%s"' % (b"F" * 40),
    ):
        with pytest.raises(msgspec.ValidationError):
            decode(body % bad)


# -- the patch a writer finishes with ---------------------------------------------------------


def test_patch_is_recorded_with_the_finish(engine: Engine) -> None:
    session(engine)
    writer(engine, "j1")
    engine.handle(c.FinishJob(job_id="j1", outcome="ok", patch=PATCH))
    assert jobrow(engine, "j1").patch == PATCH


@pytest.mark.parametrize(
    "change",
    [
        {"sha256": "A" * 64},
        {"sha256": "a" * 63},
        {"size": -1},
        {"paths": ("",)},
        {"paths": ("x" * 4097,)},
        {"paths": ("p",) * 10_001},
        {"base_commit": ""},
    ],
    ids=str,
)
def test_patch_out_of_range_is_refused_at_the_edge(change: dict[str, Any]) -> None:
    patch = msgspec.to_builtins(msgspec.structs.replace(PATCH, **change))
    body = {"command": "FinishJob", "job_id": "j", "outcome": "ok", "patch": patch}
    with pytest.raises(msgspec.ValidationError, match="patch"):
        msgspec.json.decode(msgspec.json.encode(body), type=c.FinishJob)


def test_patch_and_worktree_events_of_older_logs_decode_with_defaults() -> None:
    # Payloads as logs written before issue 28 hold them: no worktree, patch, tree or paths.
    started = msgspec.json.decode(b'{"type": "job.started", "run_id": "r"}', type=job_.JobStarted)
    finished = msgspec.json.decode(
        b'{"type": "job.finished", "outcome": "ok"}', type=job_.JobFinished
    )
    integrated = msgspec.json.decode(
        b'{"type": "result.integrated", "by": "operator", "sha256": "s"}',
        type=result_.ResultIntegrated,
    )
    assert (started.worktree, started.base_commit, finished.patch) == ("", "", None)
    assert (integrated.tree, integrated.paths) == ("", ())


# -- integrating a patch ----------------------------------------------------------------------


def test_integration_is_an_intent_then_its_confirmation(engine: Engine) -> None:
    session(engine)
    accepted(engine, "j1")
    engine.handle(begin("j1"))
    row = jobrow(engine, "j1")
    assert (row.result_state, row.result_sha256) == ("integrating", PATCH.sha256)
    assert row.integration == Integration(
        by="operator", before=BEFORE, after=AFTER, paths=PATCH.paths
    )
    assert [j.job_id for j in queries.integrations_in_flight(engine.log.connection())] == ["j1"]
    engine.handle(c.ConfirmIntegration(job_id="j1", tree=AFTER))
    row = jobrow(engine, "j1")
    assert (row.result_state, row.integrated_tree, row.result_sha256) == (
        "integrated",
        AFTER,
        PATCH.sha256,
    )
    assert queries.integrations_in_flight(engine.log.connection()) == []
    last = engine.log.read_stream("result:j1")[-1].event
    assert last == result_.ResultIntegrated(
        by="operator", sha256=PATCH.sha256, tree=AFTER, paths=PATCH.paths
    )


def test_integration_confirmed_with_another_tree_is_refused(engine: Engine) -> None:
    session(engine)
    accepted(engine, "j1")
    engine.handle(begin("j1"))
    error = refused(engine, c.ConfirmIntegration(job_id="j1", tree="9" * 40), Conflict)
    assert AFTER in str(error)


def test_integration_undone_goes_back_to_accepted_and_may_be_tried_again(engine: Engine) -> None:
    session(engine)
    accepted(engine, "j1")
    engine.handle(begin("j1"))
    engine.handle(c.UndoIntegration(job_id="j1", reason="crashed: the tree is neither"))
    row = jobrow(engine, "j1")
    assert (row.result_state, row.result_reason) == ("accepted", "good")
    engine.handle(begin("j1"))
    engine.handle(c.ConfirmIntegration(job_id="j1", tree=AFTER))
    assert jobrow(engine, "j1").result_state == "integrated"


def test_integration_confirm_or_undo_without_an_intent_is_refused(engine: Engine) -> None:
    session(engine)
    accepted(engine, "j1")
    refused(engine, c.ConfirmIntegration(job_id="j1", tree=AFTER), InvalidTransition)
    refused(engine, c.UndoIntegration(job_id="j1", reason="nothing"), InvalidTransition)


def test_integration_needs_the_recorded_patch(engine: Engine) -> None:
    session(engine)
    accepted(engine, "j1", patch=None)
    assert "job j1 has no patch to integrate" in str(refused(engine, begin("j1"), Conflict))
    accepted(engine, "j2", scope="docs")
    refused(engine, begin("j2", sha256="f" * 64), Conflict)


def test_integration_needs_a_job_that_ended_ok(engine: Engine) -> None:
    session(engine)
    writer(engine, "j1", base_commit=BASE)
    engine.handle(c.FinishJob(job_id="j1", outcome="error", patch=PATCH))
    engine.handle(c.ReadJobResult(job_id="j1"))
    engine.handle(c.AcceptJobResult(job_id="j1", reason="read it anyway"))
    error = refused(engine, begin("j1"), Conflict)
    assert "job j1 ended error: its patch is not integrated" in str(error)
    assert jobrow(engine, "j1").result_state == "accepted"


def test_integration_is_one_at_a_time(engine: Engine) -> None:
    session(engine)
    accepted(engine, "j1")
    accepted(engine, "j2", scope="docs")
    engine.handle(begin("j1"))
    assert "job j1 is being integrated" in str(refused(engine, begin("j2"), Conflict))
    engine.handle(c.ConfirmIntegration(job_id="j1", tree=AFTER))
    engine.handle(begin("j2"))


def test_integration_refused_on_a_tainted_session_and_from_read(engine: Engine) -> None:
    session(engine)
    writer(engine, "j1")
    engine.handle(c.FinishJob(job_id="j1", outcome="ok", patch=PATCH))
    engine.handle(c.ReadJobResult(job_id="j1"))
    refused(engine, begin("j1"), InvalidTransition)  # read, not accepted
    engine.handle(c.AcceptJobResult(job_id="j1", reason="fine"))
    engine.handle(c.TaintSession(session_id="s1", reason="leak"))
    refused(engine, begin("j1"), Conflict)


def test_integration_by_a_job_needs_an_ancestor(engine: Engine) -> None:
    session(engine)
    accepted(engine, "j1")
    writer(engine, "j2", scope="docs", token_digest="d" * 64)
    error = refused(engine, begin("j1", caller_job="j2", caller_token_digest="d" * 64), Forbidden)
    assert "not an ancestor" in str(error)


# -- the reads recovery and the sweep make ----------------------------------------------------


def test_worktree_query_lists_writers_ended_or_all(engine: Engine) -> None:
    session(engine)
    writer(engine, "j1")
    engine.handle(c.FinishJob(job_id="j1", outcome="ok"))
    writer(engine, "j2", scope="docs")
    engine.handle(c.AcceptJob(job_id="j3", session_id="s1", owed=False))
    engine.handle(c.StartJob(job_id="j3", run_id="r3"))
    conn = engine.log.connection()
    assert queries.job_worktrees(conn) == [queries.Worktree("j1", "/tmp/wt/j1", "ok", "s1")]
    assert [w.job_id for w in queries.job_worktrees(conn, terminal_only=False)] == ["j1", "j2"]


def test_worktree_rows_built_equal_msgspec_converted(engine: Engine) -> None:
    session(engine)
    accepted(engine, "j1")
    engine.handle(begin("j1"))
    accepted(engine, "j2", scope="docs", patch=None)
    selected = engine.log.connection().execute(rows._select_sql(JobRow, "")).fetchall()
    built, converted = rows._building_reader(JobRow), rows._converting_reader(JobRow)
    assert built is not None
    assert [built(r) for r in selected] == [converted(r) for r in selected]
    assert [r.patch for r in map(built, selected)] == [PATCH, None]
