"""Random spawn trees against the reference model of the agents' rules (issue 14) and of
writers' worktrees and integrations (issue 28).

Random sequences of spawns (one job or a batch, by the operator or by a run's token, live,
stale or another job's), starts and relaunches (a writer's in its worktree, without one, or in
another), pauses, suspends, cancels of subtrees, finishes with or without a patch, result
judgements by the operator or by jobs, integrations begun (with the recorded patch or another)
and confirmed, confirmed with a wrong tree or undone, taint and the end of a session. After
every command the engine and ``agents_model`` agree on the outcome, down to an admission
refusal's ``reason``; a refused command appended nothing; and the jobs' rows and every role
count equal the model's.
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
from engine.domain.agents import AgentPolicy, Mode
from engine.domain.job import PatchEntry
from engine.domain.rules import Settings
from projections import open_engine
from projections.view import SqlDomainView
from tests.property import agents_model as m

SESSIONS = ("s1", "s2")
MAX_JOBS = 12
AGENT = st.sampled_from(["root", "root", "w", "w", "w", "wr", "wr", "wr", "solo"])
WRITE_SCOPE = st.sampled_from(
    [("src",), ("src/a",), ("src/b",), ("src/ab",), ("docs",), ("tests",), ("src/b", "docs")]
)
GROUP = st.sampled_from([None, None, "cpu"])
# Scopes that overlap no other scope any draw can name.
FREE_SCOPES = [("lib",), ("bin",), ("etc",)]
# Most top-level work goes to s1, so that its per-session counts fill up.
SESSION = st.sampled_from(["s1", "s1", "s1", "s2"])
UNITS = st.sampled_from([1, 1, 2])
PICK = st.integers(min_value=0, max_value=MAX_JOBS - 1)
# Whose token a child spawn or a judgement carries: the parent's (caller's) live one, one of
# its earlier runs, another job's, or none (the operator).
TOKEN = st.sampled_from(["live", "live", "live", "stale", "other", "operator"])
# Draws that end or spoil things (taint, the end of a session, a misshapen item) are rare, so
# that sequences live long enough to fill every limit.
RARELY = st.sampled_from([False] * 7 + [True])
SELDOM = st.sampled_from([False] * 15 + [True])
MOSTLY = st.sampled_from([True] * 5 + [False])
JUDGE = st.sampled_from(["read", "accept", "reject", "integrate"])
# Where a run works: its own worktree (a writer's; "" for others), none, or another one.
WORKTREE = st.sampled_from(["own"] * 5 + ["none", "other"])
# How an integration in flight ends: confirmed with its after tree, with another, or undone.
END = st.sampled_from(["confirm", "confirm", "wrong tree", "undo"])
HOLDING = frozenset(m.HOLDING)
CHAIN_AGENT = st.sampled_from(["root", "w", "w", "solo", "solo"])


@st.composite
def items(draw: st.DrawFn) -> tuple[str, tuple[str, ...], str | None]:
    """An agent, a write scope that fits its mode (rarely one that does not) and a group."""
    agent = draw(AGENT)
    writer = m.ROLES[agent].writer
    if draw(SELDOM):
        agent, writer = draw(st.sampled_from([("ghost", False), (agent, not writer)]))
    return agent, draw(WRITE_SCOPE) if writer else (), draw(GROUP)


def policies() -> dict[str, AgentPolicy]:
    """The engine's side of ``agents_model.ROLES``, spelled as the adapter would build it."""
    return {
        name: AgentPolicy(
            name=name,
            mode=Mode.WORKSPACE_WRITE if role.writer else Mode.READ_ONLY,
            can_spawn=role.can_spawn,
            max_children=role.max_children,
            max_active=role.max_active,
            reject_ancestor_role=role.no_ancestor_of_its_kind,
        )
        for name, role in m.ROLES.items()
    }


def judgement(
    step: str, jid: str, by: str | None, token: str | None, sha256: str | None = None
) -> c.Command:
    """One step of a result's disposition, by the operator (``by`` None) or by job ``by``;
    ``integrate`` begins an integration of the patch ``sha256`` (the job's own by default)."""
    if step == "read":
        return c.ReadJobResult(job_id=jid, caller_job=by, caller_token_digest=token)
    if step == "integrate":
        return c.BeginIntegration(
            job_id=jid,
            caller_job=by,
            caller_token_digest=token,
            sha256=sha256 or patch_of(jid),
            before_tree=tree(f"{jid} before"),
            after_tree=tree(f"{jid} after"),
            paths=("src/x",),
        )
    judge = c.AcceptJobResult if step == "accept" else c.RejectJobResult
    return judge(job_id=jid, caller_job=by, caller_token_digest=token, reason="because")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def tree(text: str) -> str:
    """A git tree id (SHA-1 form)."""
    return hashlib.sha1(text.encode()).hexdigest()  # an id, not a secret


def patch_of(jid: str) -> str:
    """The sha256 of the patch job ``jid`` finishes with, when it finishes with one."""
    return digest(f"patch of {jid}")


class AgentsVersusModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="foldline-agents-"))
        rules = Settings(
            resource_groups={"cpu": m.CPU},
            max_depth=m.MAX_DEPTH,
            agents=policies(),
            max_active_agents=m.MAX_ACTIVE_AGENTS,
            max_active_writers=m.MAX_ACTIVE_WRITERS,
        )
        self.engine = open_engine(self.dir / "agents.db", rules)
        self.model = m.AgentsModel()
        self.ids: list[str] = []  # job ids in the order they were first named
        self.tokens: dict[str, list[str]] = {}  # job id -> digests of its runs, oldest first
        self.runs = 0

    def teardown(self) -> None:
        rebuilt_equal = self.engine.log.content_hash() == self.engine.log.rebuild()
        self.engine.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        assert rebuilt_equal

    # -- plumbing --------------------------------------------------------------------------------

    def run(self, command: c.Command) -> str:
        head = self.engine.log.head()
        try:
            self.engine.handle(command)
            real = "ok"
        except EngineError as ex:
            reason = ex.fields.get("reason") if ex.code == "admission_rejected" else None
            real = f"{ex.code}:{reason}" if reason else ex.code
        expected = self.model.handle(command)
        event(f"{type(command).__name__}: {real}")  # --hypothesis-show-statistics shows the mix
        assert real == expected, f"{command}: engine {real}, model {expected}"
        if real != "ok":
            assert self.engine.log.head() == head, f"{command} was refused but appended"
        return real

    def spawn(self, command: c.AcceptJob | c.AcceptJobs) -> bool:
        """Run a spawn; refused, its new ids are forgotten again (all or nothing)."""
        if self.run(command) == "ok":
            return True
        del self.ids[len(self.model.jobs) :]
        return False

    def job(self, pick: int, among: frozenset[str] | None = None) -> str:
        """An existing job, one in a state of ``among`` while there is one."""
        fit = [j for j in self.ids if among is None or self.model.jobs[j]["state"] in among]
        pool = fit or self.ids
        return pool[pick % len(pool)] if pool else "missing"

    def new_id(self, pick: int) -> str:
        """A fresh id while there is room, else an existing one (refused: already exists)."""
        if len(self.ids) < MAX_JOBS:
            self.ids.append(f"j{len(self.ids)}")
            return self.ids[-1]
        return self.job(pick)

    def token(self, kind: str, jid: str, other: int) -> str | None:
        mine = self.tokens.get(jid, [])
        if kind == "operator":
            return None
        if kind == "live":
            return mine[-1] if mine else digest("never issued")
        if kind == "stale":
            return mine[0] if len(mine) > 1 else digest(f"{jid} stale")
        theirs = self.tokens.get(self.job(other), [])
        return theirs[-1] if theirs else digest("nobody's")

    def item(
        self,
        jid: str,
        sid: str,
        parent: str | None,
        agent: str,
        scope: tuple[str, ...],
        group: str | None,
        units: int,
        token: str | None,
    ) -> c.AcceptJob:
        return c.AcceptJob(
            job_id=jid,
            session_id=sid,
            agent=agent,
            parent_job=parent,
            write_scope=scope,
            resource_group=group,
            units=units,
            owed=False,
            caller_token_digest=token,
        )

    # -- rules -----------------------------------------------------------------------------------

    def start_run(self, jid: str, where: str = "own", resumed: bool = False) -> str:
        """A new run of ``jid`` with a new token: from queued, or a relaunch of a paused or
        suspended job, which is admitted again like new work. ``where`` (``WORKTREE``): a
        writer's own worktree, none, or another path."""
        self.runs += 1
        token = digest(f"run {self.runs}")
        writer = bool(self.model.jobs.get(jid, {}).get("scope"))
        worktree = {
            "own": f"/tmp/wt/{jid}" if writer else "",
            "none": "",
            "other": f"/tmp/wt/{jid}-{self.runs}",
        }[where]
        start = c.StartJob(
            job_id=jid,
            run_id=f"run{self.runs}",
            token_digest=token,
            worktree=worktree,
            resumed=resumed,
        )
        outcome = self.run(start)
        if outcome == "ok":
            self.tokens.setdefault(jid, []).append(token)
        return outcome

    @initialize()
    def open_sessions(self) -> None:
        for sid in SESSIONS:
            self.run(c.CreateSession(session_id=sid, start_run_id="r"))
            self.spawn(self.item(self.new_id(0), sid, None, "root", (), None, 1, None))
            self.start_run(self.ids[-1])

    @rule(sid=SESSION, item=items(), units=UNITS, pick=PICK, then_start=MOSTLY)
    def operator_spawns(
        self,
        sid: str,
        item: tuple[str, tuple[str, ...], str | None],
        units: int,
        pick: int,
        then_start: bool,
    ) -> None:
        agent, scope, group = item
        jid = self.new_id(pick)
        if self.spawn(self.item(jid, sid, None, agent, scope, group, units, None)) and then_start:
            self.start_run(jid)

    @rule(
        parent=PICK,
        item=items(),
        units=UNITS,
        token=TOKEN,
        other=PICK,
        elsewhere=RARELY,
        then_start=MOSTLY,
    )
    def run_spawns(
        self,
        parent: int,
        item: tuple[str, tuple[str, ...], str | None],
        units: int,
        token: str,
        other: int,
        elsewhere: bool,
        then_start: bool,
    ) -> None:
        agent, scope, group = item
        pid = self.job(parent, frozenset({"running"}))
        sid = self.model.jobs[pid]["session"]
        if elsewhere:  # the token's job is in one session, the spawn names the other
            sid = SESSIONS[1 - SESSIONS.index(sid)]
        jid = self.new_id(other)
        spawn = self.item(jid, sid, pid, agent, scope, group, units, self.token(token, pid, other))
        if self.spawn(spawn) and then_start:
            self.start_run(jid)

    @rule(parent=PICK, token=TOKEN, other=PICK, batch=st.lists(items(), min_size=2, max_size=4))
    def run_spawns_batch(
        self,
        parent: int,
        token: str,
        other: int,
        batch: list[tuple[str, tuple[str, ...], str | None]],
    ) -> None:
        pid = self.job(parent, frozenset({"running"}))
        sid = self.model.jobs[pid]["session"]
        digest_ = self.token(token, pid, other)
        self.spawn(
            c.AcceptJobs(
                jobs=tuple(
                    self.item(self.new_id(other + n), sid, pid, agent, scope, group, 1, digest_)
                    for n, (agent, scope, group) in enumerate(batch)
                )
            )
        )

    @rule(pick=PICK, where=WORKTREE, resumed=st.booleans())
    def start(self, pick: int, where: str, resumed: bool) -> None:
        jid = self.job(pick, frozenset({"queued", "paused", "suspended"}))
        self.start_run(jid, where, resumed)

    @rule(pick=PICK, outcome=st.sampled_from(["ok", "ok", "error"]), patched=MOSTLY)
    def finish(self, pick: int, outcome: str, patched: bool) -> None:
        jid = self.job(pick, frozenset({"running"}))
        patch = PatchEntry(sha256=patch_of(jid), size=7, paths=("src/x",), base_commit="b" * 40)
        self.run(c.FinishJob(job_id=jid, outcome=outcome, patch=patch if patched else None))

    @rule(
        pick=PICK,
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
    def control(self, pick: int, action: type) -> None:
        self.run(action(job_id=self.job(pick)))

    @rule(pick=PICK, step=JUDGE, caller=PICK, token=TOKEN, other=PICK)
    def judge(self, pick: int, step: str, caller: int, token: str, other: int) -> None:
        # Any caller: a live run that may not be an ancestor, a stale token, another's.
        by = None if token == "operator" else self.job(caller, frozenset({"running"}))
        digest_ = self.token(token, by, other) if by else None
        self.run(judgement(step, self.job(pick, frozenset(m.FINISHED)), by, digest_))

    @rule(
        pick=PICK,
        who=st.sampled_from(["parent", "parent", "parent", "operator", "sibling"]),
        walked=st.integers(min_value=0, max_value=3),
        reject=RARELY,
        then=st.lists(JUDGE, max_size=2),
    )
    def judge_in_turn(
        self, pick: int, who: str, walked: int, reject: bool, then: list[str]
    ) -> None:
        # One judge takes one result part of the way down its path (read, accept or reject,
        # integrate), then tries any steps after it: a second accept, a reject after an
        # accept, an integration from read or twice must each be refused. The judge is the
        # parent's live run, the operator, or a live run of the session that is no ancestor.
        jid = self.job(pick, frozenset(m.FINISHED))
        job = self.model.jobs.get(jid, {})
        by = job.get("parent") if who == "parent" else None
        if who == "sibling":
            by = self.job(pick + 1, frozenset({"running"}))
        token = self.token("live", by, 0) if by else None
        path = ["read", "reject" if reject else "accept", "integrate"][:walked]
        for step in path + then:
            self.run(judgement(step, jid, by, token))

    @rule(
        pick=PICK, suspend=MOSTLY, twins=st.integers(min_value=1, max_value=2), same=st.booleans()
    )
    def relaunch_after_others_took_the_place(
        self, pick: int, suspend: bool, twins: int, same: bool
    ) -> None:
        # A suspended job gave its place back (a live-paused one kept it, ADR 0058); jobs like
        # it take the place (the same write scope, or a free one); relaunching it must be
        # admitted like new work, and continuing a paused one needs nothing.
        jid = self.job(pick, HOLDING)
        job = self.model.jobs.get(jid)
        if (
            job is None
            or self.run((pausing.SuspendJob if suspend else pausing.PauseJob)(job_id=jid)) != "ok"
        ):
            return
        for n in range(twins):
            scope = job["scope"] if same or not job["scope"] else FREE_SCOPES[n]
            twin = self.item(
                self.new_id(pick + n),
                job["session"],
                job["parent"],
                job["agent"],
                scope,
                job["group"],
                job["units"],
                None,
            )
            if self.spawn(twin):
                self.start_run(twin.job_id)
        if suspend:
            self.start_run(jid)
        else:
            self.run(pausing.ContinueJob(job_id=jid))

    @rule(pick=PICK)
    def solo_under_its_own_grandparent(self, pick: int) -> None:
        self.runs_spawn_a_chain(pick, "solo", ["w", "solo"])  # the last must be refused

    @rule(
        parent=PICK,
        top=st.one_of(st.none(), CHAIN_AGENT),
        chain=st.lists(CHAIN_AGENT, min_size=2, max_size=3),
    )
    def runs_spawn_a_chain(self, parent: int, top: str | None, chain: list[str]) -> None:
        # Each new job's own run spawns the next one: depth, ancestor roles (solo -> w -> solo
        # needs room below the top), deep subtrees. ``top``: the operator starts the chain.
        pid = self.job(parent, frozenset({"running"}))
        if top is not None:
            pid = self.new_id(parent)
            if not self.spawn(self.item(pid, "s1", None, top, (), None, 1, None)):
                return
            self.start_run(pid)
        for agent in chain:
            job = self.model.jobs.get(pid)
            if job is None or job["state"] != "running":
                return
            jid = self.new_id(parent)
            token = self.token("live", pid, 0)
            if not self.spawn(self.item(jid, job["session"], pid, agent, (), None, 1, token)):
                return
            self.start_run(jid)
            pid = jid

    @rule(pick=PICK)
    def cancel_a_deep_subtree(self, pick: int) -> None:
        # Cancel a job with live work two or more levels below it, when there is one.
        deep = [
            j
            for j in self.ids
            for k, below in self.model.jobs.items()
            if below["state"] in m.LIVE and j in self.model.lineage(k)[2:]
        ]
        self.run(c.CancelJob(job_id=deep[pick % len(deep)] if deep else self.job(pick)))

    @rule(sid=SESSION, scopes=st.permutations(FREE_SCOPES), count=st.integers(1, 3))
    def writers_fill_a_session(self, sid: str, scopes: list[tuple[str, ...]], count: int) -> None:
        # Writers with scopes that do not overlap, so the writer count is what refuses.
        for scope in scopes[:count]:
            jid = self.new_id(0)
            if self.spawn(self.item(jid, sid, None, "wr", scope, None, 1, None)):
                self.start_run(jid)

    @rule(sid=SESSION, units=st.lists(UNITS, min_size=2, max_size=4))
    def group_fills_up(self, sid: str, units: list[int]) -> None:
        # Read-only jobs of the one resource group until its capacity refuses one.
        for n in units:
            jid = self.new_id(0)
            if not self.spawn(self.item(jid, sid, None, "root", (), "cpu", n, None)):
                return

    @rule(pick=PICK, end=END, then_again=RARELY, own=MOSTLY)
    def integrate(self, pick: int, end: str, then_again: bool, own: bool) -> None:
        # An accepted result's integration begun (with its own patch, or mostly so) and ended:
        # confirmed with the intent's after tree, with another (refused: still in flight), or
        # undone back to accepted. Another job's integration begun meanwhile is refused.
        accepted = [j for j in self.ids if self.model.jobs[j]["result"] == "accepted"]
        jid = accepted[pick % len(accepted)] if accepted else self.job(pick)
        sha256 = None if own else digest("another patch")
        self.run(judgement("integrate", jid, None, None, sha256))
        if then_again:  # a second one while this one is (perhaps) in flight
            self.run(judgement("integrate", self.job(pick + 1, frozenset(m.FINISHED)), None, None))
        self.end_integration(pick, end)

    @rule(pick=PICK, end=END)
    def end_integration(self, pick: int, end: str) -> None:
        # The server's own step for an integration in flight (any job while there is none).
        flying = [j for j in self.ids if self.model.jobs[j]["result"] == "integrating"]
        jid = flying[pick % len(flying)] if flying else self.job(pick)
        if end == "undo":
            self.run(c.UndoIntegration(job_id=jid, reason="the tree was written back"))
            return
        after = tree(f"{jid} after") if end == "confirm" else tree("some other tree")
        self.run(c.ConfirmIntegration(job_id=jid, tree=after))

    @rule(pick=PICK)
    def taint_then_integrate(self, pick: int) -> None:
        # An accepted result of a session that is then tainted is never integrated.
        accepted = [j for j in self.ids if self.model.jobs[j]["result"] == "accepted"]
        if accepted:
            jid = accepted[pick % len(accepted)]
            self.run(c.TaintSession(session_id=self.model.jobs[jid]["session"], reason="bad"))
            self.run(judgement("integrate", jid, None, None))

    @rule(sid=st.sampled_from(SESSIONS), rarely=SELDOM)
    def taint(self, sid: str, rarely: bool) -> None:
        if rarely:
            self.run(c.TaintSession(session_id=sid, reason="random"))

    @rule(sid=st.sampled_from(SESSIONS), rarely=SELDOM)
    def end_session(self, sid: str, rarely: bool) -> None:
        if rarely:
            self.run(c.CancelSession(session_id=sid))

    # -- what must hold after every step ---------------------------------------------------------

    @invariant()
    def rows_equal_the_model(self) -> None:
        conn = self.engine.log.connection()
        rows = conn.execute(
            "SELECT job_id, state, result_state, agent, parent_job, depth, token_digest,"
            " worktree, patch_sha256 FROM jobs"
        ).fetchall()
        assert {row[0]: row[1:] for row in rows} == {
            jid: (
                j["state"],
                j["result"],
                j["agent"],
                j["parent"],
                j["depth"],
                j["token"],
                j["worktree"],
                j["patch"],
            )
            for jid, j in self.model.jobs.items()
        }
        flying = [jid for jid, j in self.model.jobs.items() if j["result"] == "integrating"]
        assert len(flying) <= 1, "integrations are one at a time"
        sessions = dict(conn.execute("SELECT session_id, state FROM sessions").fetchall())
        assert sessions == {sid: s["state"] for sid, s in self.model.sessions.items()}

    @invariant()
    def role_counts_equal_the_model(self) -> None:
        view = SqlDomainView(self.engine.log.connection().cursor())
        for agent in m.ROLES:
            assert view.jobs_holding(agent=agent) == len(self.model.holding(agent=agent))
        for sid in SESSIONS:
            assert view.jobs_holding(session_id=sid) == len(self.model.holding(session=sid))
        for jid in self.ids:
            assert view.jobs_holding(parent_job=jid) == len(self.model.holding(parent=jid))
        assert view.units_held("cpu") == sum(
            self.model.jobs[j]["units"] for j in self.model.holding(group="cpu")
        )


AgentsVersusModel.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# Its examples take 15-20 s on two cores: in `make test`, not in the edit loop's test-fast.
test_agents_engine_matches_reference_model = pytest.mark.slow(AgentsVersusModel.TestCase)
