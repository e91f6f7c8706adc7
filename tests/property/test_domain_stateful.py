"""Random command sequences on all five kinds, against the reference model of the rules
(agents' spawn permissions and counts, result disposition, writers' worktrees and the
integration of their patches included).

After every command: the outcome agrees, a refused command appended nothing, and the read
models (states, reply pointers, taint, capacity) equal the model's.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from engine import EngineError
from engine.domain import commands as c
from engine.domain import pausing
from engine.domain.agents import DEFAULT_AGENT, AgentPolicy
from engine.domain.job import PatchEntry
from engine.domain.rules import Settings
from projections import open_engine
from projections.view import SqlDomainView
from tests.support.backends import log_target
from tests.support.domain_model import AGENTS as MODEL_AGENTS
from tests.support.domain_model import MAX_ACTIVE_AGENTS, DomainModel

LIMITS = {"cpu": 3}
SESSIONS = st.sampled_from(["s1", "s2"])
JOBS = st.sampled_from(["j1", "j2", "j3", "j4"])
TASKS = st.sampled_from(["t1", "t2"])
GROUPS = st.sampled_from([None, "cpu", "cpu"])
# Rules that end or block a session act only one time in RARELY draws, so that sequences
# live long enough to exercise jobs, tasks and pointers.
RARELY = st.integers(min_value=0, max_value=3)
COMMAND_IDS = st.sampled_from([None, None, None, None, "k1", "k2"])
PARENTS = st.sampled_from([None, None, None, "j1", "j2"])
AGENT_NAMES = st.sampled_from(["", "", "boss", "w", "w", "ghost"])
AGENTS = {
    name: AgentPolicy(name=name, can_spawn=spawns, max_children=children, max_active=active)
    if name
    else DEFAULT_AGENT
    for name, (spawns, children, active) in MODEL_AGENTS.items()
}
RESULT_COMMANDS = st.sampled_from(
    [c.ReadJobResult, c.AcceptJobResult, c.RejectJobResult, c.BeginIntegration]
)
SHA = st.sampled_from(["own", "own", "own", "other"])


def patch_of(jid: str) -> str:
    """The sha256 of the patch job ``jid`` finishes with, when it finishes with one."""
    return hashlib.sha256(f"patch of {jid}".encode()).hexdigest()


def tree(jid: str, which: str) -> str:
    return hashlib.sha1(f"{jid} {which}".encode()).hexdigest()  # an id, not a secret


class EngineVersusModel(RuleBasedStateMachine):
    backend = "sqlite"  # the storage backend (tests.support.backends)

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="foldline-domain-"))
        settings = Settings(
            resource_groups=LIMITS,
            max_depth=2,
            agents=AGENTS,
            max_active_agents=MAX_ACTIVE_AGENTS,
        )
        self.engine = open_engine(log_target(self.backend, self.dir), settings)
        self.model = DomainModel(LIMITS, max_depth=2)

    def teardown(self) -> None:
        # Every read model kept incrementally equals a fold of the log from scratch.
        rebuilt_equal = self.engine.log.content_hash() == self.engine.log.rebuild()
        self.engine.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        assert rebuilt_equal

    def run(self, command: c.Command) -> None:
        head = self.engine.log.head()
        try:
            result = self.engine.handle(command)
            real = "duplicate" if result.duplicate else "ok"
        except EngineError as ex:
            real = ex.code
        expected = self.model.handle(command)
        event(f"{type(command).__name__}: {real}")  # --hypothesis-show-statistics shows the mix
        assert real == expected, f"{command}: engine {real}, model {expected}"
        if real != "ok":
            assert self.engine.log.head() == head, f"{command} was refused but appended"

    @initialize(group=st.sampled_from([None, None, "cpu"]))
    def open_sessions(self, group: str | None) -> None:
        for sid in ("s1", "s2"):
            self.run(c.CreateSession(session_id=sid, resource_group=group, start_run_id="r"))

    @rule(sid=SESSIONS, group=GROUPS, started=st.booleans(), cid=COMMAND_IDS)
    def create_session(self, sid: str, group: str | None, started: bool, cid: str | None) -> None:
        self.run(
            c.CreateSession(
                session_id=sid,
                resource_group=group,
                command_id=cid,
                start_run_id="r" if started else None,
            )
        )

    @rule(
        jid=JOBS,
        sid=SESSIONS,
        group=GROUPS,
        owed=st.booleans(),
        parent=PARENTS,
        cid=COMMAND_IDS,
        agent=AGENT_NAMES,
    )
    def accept_job(
        self,
        jid: str,
        sid: str,
        group: str | None,
        owed: bool,
        parent: str | None,
        cid: str | None,
        agent: str,
    ) -> None:
        self.run(
            c.AcceptJob(
                job_id=jid,
                session_id=sid,
                resource_group=group,
                owed=owed,
                parent_job=parent,
                command_id=cid,
                agent=agent,
            )
        )

    @rule(jid=JOBS, sid=SESSIONS, parent=PARENTS, agent=st.sampled_from(["w", "boss"]))
    def spawn_unowed(self, jid: str, sid: str, parent: str | None, agent: str) -> None:
        # Unowed jobs are never superseded, so the role counts fill up.
        self.run(
            c.AcceptJob(job_id=jid, session_id=sid, parent_job=parent, agent=agent, owed=False)
        )

    @rule(jid=JOBS, action=RESULT_COMMANDS, sha=SHA)
    def judge_result(self, jid: str, action: type, sha: str) -> None:
        if action is c.BeginIntegration:
            self.run(
                c.BeginIntegration(
                    job_id=jid,
                    sha256=patch_of(jid) if sha == "own" else "f" * 64,
                    before_tree=tree(jid, "before"),
                    after_tree=tree(jid, "after"),
                )
            )
        elif action is c.ReadJobResult:
            self.run(action(job_id=jid))
        else:
            self.run(action(job_id=jid, reason="because"))

    @rule(
        jid=JOBS,
        sid=SESSIONS,
        patched=st.sampled_from([True, True, True, False]),
        sha=SHA,
        end=st.sampled_from(["confirm", "wrong tree", "undo", "none", "none"]),
    )
    def run_and_integrate(self, jid: str, sid: str, patched: bool, sha: str, end: str) -> None:
        # A writer's run walked to its integration, so that intents meet (one at a time),
        # and are confirmed or undone (or left in flight for a later step).
        if jid not in self.model.jobs:
            self.accept_and_start(jid, sid, None, writer=True, worktree=True)
        self.finish_job(jid, "ok", patched)
        self.run(c.ReadJobResult(job_id=jid))
        self.run(c.AcceptJobResult(job_id=jid, reason="fine"))
        self.judge_result(jid, c.BeginIntegration, sha)
        if end != "none":
            self.end_integration(jid, end)

    @rule(jid=JOBS, end=st.sampled_from(["confirm", "confirm", "wrong tree", "undo"]))
    def end_integration(self, jid: str, end: str) -> None:
        # The server's own step after the files are written (or recovery's after a crash).
        if end == "undo":
            self.run(c.UndoIntegration(job_id=jid, reason="the tree was written back"))
        else:
            after = tree(jid, "after") if end == "confirm" else tree(jid, "other")
            self.run(c.ConfirmIntegration(job_id=jid, tree=after))

    @rule(jid=JOBS, sid=SESSIONS, group=GROUPS, writer=st.booleans(), worktree=st.booleans())
    def accept_and_start(
        self, jid: str, sid: str, group: str | None, writer: bool, worktree: bool
    ) -> None:
        # A writer's scope is its own directory, so no two of them overlap.
        scope = (f"w/{jid}",) if writer else ()
        self.run(c.AcceptJob(job_id=jid, session_id=sid, resource_group=group, write_scope=scope))
        self.start_job(jid, worktree)

    @rule(jid=JOBS, worktree=st.sampled_from([True, True, True, False]))
    def start_job(self, jid: str, worktree: bool) -> None:
        # Without a worktree, a writer's start is refused (writable_target_not_git).
        self.run(c.StartJob(job_id=jid, run_id="run", worktree=f"/wt/{jid}" if worktree else ""))

    @rule(jid=JOBS, outcome=st.sampled_from(["ok", "error"]), patched=st.booleans())
    def finish_job(self, jid: str, outcome: str, patched: bool) -> None:
        patch = PatchEntry(sha256=patch_of(jid), size=1, paths=("a",), base_commit="0" * 40)
        self.run(c.FinishJob(job_id=jid, outcome=outcome, patch=patch if patched else None))

    @rule(
        jid=JOBS,
        action=st.sampled_from(
            [
                pausing.PauseJob,
                pausing.ContinueJob,
                pausing.SuspendJob,
                c.CancelJob,
                c.ConfirmJobCancelled,
            ]
        ),
    )
    def control_job(self, jid: str, action: type) -> None:
        self.run(action(job_id=jid))

    @rule(tid=TASKS, sid=SESSIONS)
    def create_task(self, tid: str, sid: str) -> None:
        self.run(c.CreateTask(task_id=tid, session_id=sid))

    @rule(tid=TASKS, action=st.sampled_from([c.CompleteTask, c.CancelTask, c.UpdateTaskStatus]))
    def task_step(self, tid: str, action: type) -> None:
        self.run(action(task_id=tid))

    @rule(sid=SESSIONS, action=st.sampled_from([c.PauseSession, c.AttachSession]))
    def session_step(self, sid: str, action: type) -> None:
        self.run(action(session_id=sid))

    @rule(sid=SESSIONS, by=st.sampled_from(["operator", "client"]), rarely=RARELY)
    def detach(self, sid: str, by: str, rarely: int) -> None:
        if rarely:
            return
        self.run(c.DetachSession(session_id=sid, by=by))

    @rule(sid=SESSIONS, allow=st.booleans())
    def resume(self, sid: str, allow: bool) -> None:
        self.run(c.ResumeSession(session_id=sid, allow_tainted=allow))

    @rule(sid=SESSIONS, rarely=RARELY)
    def taint(self, sid: str, rarely: int) -> None:
        if rarely:
            return
        self.run(c.TaintSession(session_id=sid, reason="random"))

    @rule(sid=SESSIONS, requested=st.sampled_from(["completed", "failed"]), rarely=RARELY)
    def finish_session(self, sid: str, requested: str, rarely: int) -> None:
        if rarely:
            return
        self.run(c.FinishSession(session_id=sid, requested=requested))

    @rule(sid=SESSIONS, wait=st.booleans(), cancel=st.booleans(), rarely=RARELY)
    def close_session(self, sid: str, wait: bool, cancel: bool, rarely: int) -> None:
        if rarely:
            return
        command = c.CancelSession if cancel else c.StopSession
        self.run(command(session_id=sid, wait=wait))

    @rule(sid=SESSIONS, to=SESSIONS, settle=st.booleans())
    def relay(self, sid: str, to: str, settle: bool) -> None:
        self.run(
            c.SettleRelay(session_id=sid) if settle else c.OweRelay(session_id=sid, to_session=to)
        )

    @invariant()
    def read_models_equal_the_model(self) -> None:
        conn = self.engine.log.connection()
        sessions = {
            sid: (state, (kind, ref) if kind else None, bool(tainted))
            for sid, state, kind, ref, tainted in conn.execute(
                "SELECT session_id, state, owes_kind, owes_ref, tainted FROM sessions"
            )
        }
        assert sessions == {
            sid: (s["state"], s["owes"], s["tainted"]) for sid, s in self.model.sessions.items()
        }
        jobs = {
            jid: (state, result, patch)
            for jid, state, result, patch in conn.execute(
                "SELECT job_id, state, result_state, patch_sha256 FROM jobs"
            )
        }
        assert jobs == {
            jid: (j["state"], j["result"], j["patch"]) for jid, j in self.model.jobs.items()
        }
        tasks = dict(conn.execute("SELECT task_id, state FROM tasks").fetchall())
        assert tasks == {tid: t["state"] for tid, t in self.model.tasks.items()}
        view = SqlDomainView(conn.cursor())
        assert view.units_held("cpu") == self.model._held("cpu")


EngineVersusModel.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# Its examples take 15-20 s on two cores: in `make test`, not in the edit loop's test-fast.
test_domain_engine_matches_reference_model = pytest.mark.slow(EngineVersusModel.TestCase)


class EngineOnPostgresVersusModel(EngineVersusModel):
    backend = "postgres"


# Fewer runs: each opens a log in a fresh schema, and the SQLite runs cover the model's breadth.
EngineOnPostgresVersusModel.TestCase.settings = settings(
    max_examples=10,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_domain_engine_on_postgres_matches_reference_model = EngineOnPostgresVersusModel.TestCase
