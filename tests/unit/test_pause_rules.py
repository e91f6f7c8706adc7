"""Work under its root's control (ADR 0058), as rules on SQLite and PostgreSQL: a live pause
holds its units and write scope, a cold pause asks a channel run to finalize and holds until
its run is retired, a lost run is suspended, a continue may come from an ancestor's live run,
and recovery resumes owed jobs while their cut-off workers wait."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from engine import FixedClock
from engine.domain import commands as c
from engine.domain import controls as ctl
from engine.domain import pausing
from engine.domain.agents import DEFAULT_AGENT
from engine.domain.errors import AdmissionRejected, Conflict, Forbidden
from engine.domain.rows import JobRow
from engine.domain.rules import Settings
from engine.domain.rules.pause import PAUSE_FINALIZE_TEXT
from engine.engine import Engine
from projections import open_engine, queries
from tests.support.backends import log_target
from tests.unit.test_rules import job, refused, session

DIGEST = "a" * 64


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Iterator[Engine]:
    # Pause and continue of a descendant are granted explicitly (ADR 0057's default grants
    # only the live channel and inspect).
    agent = msgspec.structs.replace(DEFAULT_AGENT, controls=(("", ("pause", "continue")),))
    settings = Settings(resource_groups={"cpu": 1}, agents={"": agent})
    opened = open_engine(log_target(request.param, tmp_path), settings, clock=clock)
    yield opened
    opened.log.close()


def _row(engine: Engine, jid: str) -> JobRow:
    found = queries.job(engine.log.connection(), jid)
    assert found is not None
    return found


def _kinds(engine: Engine, jid: str) -> list[str]:
    return [e.event_type for e in engine.log.read_stream(f"job:{jid}")]


def test_pause_live_holds_units_and_write_scope_and_continues_without_readmission(
    engine: Engine,
) -> None:
    session(engine)
    job(engine, "j1", resource_group="cpu", write_scope=("src",), start=False)
    engine.handle(c.StartJob(job_id="j1", run_id="r1", pid=100, worktree="/wt/j1"))
    engine.handle(pausing.PauseJob(job_id="j1"))
    assert (_row(engine, "j1").state, _row(engine, "j1").pause) == ("paused", "live")
    refused(
        engine, c.AcceptJob(job_id="j2", session_id="s1", resource_group="cpu"), AdmissionRejected
    )
    refused(
        engine,
        c.AcceptJob(job_id="j3", session_id="s1", owed=False, write_scope=("src/x",)),
        AdmissionRejected,
    )
    refused(engine, pausing.PauseJob(job_id="j1"), Conflict)  # paused already
    engine.handle(pausing.ContinueJob(job_id="j1"))
    assert (_row(engine, "j1").state, _row(engine, "j1").pause) == ("running", None)


def test_pause_cold_finalizes_a_channel_run_and_frees_what_it_held_once_retired(
    engine: Engine,
) -> None:
    session(engine)
    job(engine, "j1", resource_group="cpu")
    engine.handle(c.StartJob(job_id="j1", run_id="r1", pid=100, input="lines"))
    engine.handle(pausing.PauseJob(job_id="j1", mode="cold", grace_s=5))
    row = _row(engine, "j1")
    assert (row.state, row.pause, row.pause_grace_s) == ("paused", "cold", 5)
    finalize = engine.log.read_stream("job:j1")[-2].event
    assert (finalize.action, finalize.text) == ("finalize", PAUSE_FINALIZE_TEXT)  # type: ignore[attr-defined]
    # While its run ends it holds its unit, and its continue waits for that end.
    refused(
        engine, c.AcceptJob(job_id="j2", session_id="s1", resource_group="cpu"), AdmissionRejected
    )
    refused(engine, pausing.ContinueJob(job_id="j1"), Conflict)
    engine.handle(c.RecordJobOutput(job_id="j1", text="what I have\n"))  # it may still print
    refused(engine, pausing.RetireJob(job_id="j1", run_id="r0"), Conflict)  # not its run
    engine.handle(pausing.RetireJob(job_id="j1", run_id="r1", exit_code=0, reason="finalized"))
    assert (_row(engine, "j1").pause, _row(engine, "j1").exit_code) == ("retired", 0)
    assert queries.runs(engine.log.connection()) == []
    engine.handle(c.AcceptJob(job_id="j2", session_id="s1", resource_group="cpu", owed=False))
    # The relaunch is re-admitted like new work: refused while j2 holds the unit.
    refused(engine, c.StartJob(job_id="j1", run_id="r2", resumed=True), AdmissionRejected)
    engine.handle(pausing.RefuseContinue(job_id="j1", reason="capacity", by="operator"))
    assert _kinds(engine, "j1")[-1] == "job.continue_refused"
    engine.handle(c.CancelJob(job_id="j2"))
    engine.handle(c.StartJob(job_id="j1", run_id="r2", resumed=True))
    assert (_row(engine, "j1").state, _row(engine, "j1").pause) == ("running", None)


def test_pause_a_lost_run_is_suspended_and_its_relaunch_readmitted(engine: Engine) -> None:
    session(engine)
    job(engine, "j1", resource_group="cpu", start=True)
    refused(engine, pausing.SuspendJob(job_id="j1", run_id="old", reason="run lost"), Conflict)
    engine.handle(pausing.SuspendJob(job_id="j1", run_id="run-j1", reason="run lost", exit_code=-9))
    row = _row(engine, "j1")
    assert (row.state, row.reason, row.exit_code, row.finished_at) == (
        "suspended",
        "run lost",
        -9,
        None,
    )
    engine.handle(c.StartJob(job_id="j1", run_id="again", resumed=True))
    assert _row(engine, "j1").state == "running"


def test_pause_continue_by_an_ancestors_live_run_only(engine: Engine) -> None:
    session(engine)
    job(engine, "root")
    engine.handle(c.StartJob(job_id="root", run_id="rr", token_digest=DIGEST))
    job(engine, "w1", parent_job="root", owed=False, start=True)
    job(engine, "other", owed=False, start=True)
    engine.handle(pausing.SuspendJob(job_id="w1", reason="run cut off"))
    engine.handle(pausing.SuspendJob(job_id="other", reason="run cut off"))
    by_root = {"caller_job": "root", "caller_token_digest": DIGEST}
    relaunch = {"action": "continue", "relaunch": True, **by_root}
    refused(engine, ctl.ControlJob(job_id="other", **relaunch), Forbidden)  # type: ignore[arg-type]
    # The continue is checked and recorded in the write that starts its new run (the
    # dispatcher's request); here two writes of the same commands.
    engine.handle(ctl.ControlJob(job_id="w1", **relaunch))  # type: ignore[arg-type]
    engine.handle(c.StartJob(job_id="w1", run_id="x", resumed=True))
    engine.handle(pausing.PauseJob(job_id="w1", **by_root))
    engine.handle(pausing.ContinueJob(job_id="w1", **by_root))
    assert _row(engine, "w1").state == "running"
    assert _row(engine, "w1").control_revision == 3  # relaunched, paused, continued


def test_pause_recovery_resumes_owed_jobs_and_their_cut_off_workers_wait(engine: Engine) -> None:
    session(engine)
    job(engine, "root", start=True)
    job(engine, "w1", parent_job="root", owed=False, start=True)
    job(engine, "g1", parent_job="w1", owed=False, start=True)
    for jid in ("root", "w1", "g1"):
        engine.handle(pausing.SuspendJob(job_id=jid, reason="run cut off"))
    assert queries.resumable_jobs(engine.log.connection(), cut_off="run cut off") == ["root"]
    # The resumed root sees its worker suspended (what ``/v1/jobs?parent=`` answers).
    page = queries.jobs_page(engine.log.connection(), None, None, None, 10, parent_job="root")
    assert [(j.job_id, j.state) for j in page.rows] == [("w1", "suspended")]
