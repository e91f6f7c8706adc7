"""A reference model of the agents' rules (issue 14, design.md §5.5, §4.8, §4.7) and of
writers' worktrees and integrations (issue 28), written from the issue text with dicts and lists.

It knows nothing of SQL, events or the engine's rule code. The stateful test in
``test_agents_stateful`` drives it and a real engine with the same commands and checks that
both give the same outcome (down to the refusal's ``reason``) and the same rows. The limits are
small on purpose, so that random sequences keep hitting each of them exactly at the edge.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from engine.domain import commands as c
from engine.domain import pausing


@dataclass(frozen=True)
class Role:
    """One agent as the model reads it: spawn permissions and counted limits."""

    writer: bool = False  # workspace-write: needs a write scope; read-only takes none
    can_spawn: tuple[str, ...] = ()
    max_children: int | None = None
    max_active: int | None = None
    no_ancestor_of_its_kind: bool = False


ROLES = {
    "root": Role(can_spawn=("root", "w", "wr", "solo"), max_children=2),
    "w": Role(can_spawn=("w", "solo"), max_active=2),
    "wr": Role(writer=True),
    # solo -> w -> solo is refused too: the rule looks at every ancestor, not the parent only.
    "solo": Role(can_spawn=("solo", "w"), no_ancestor_of_its_kind=True),
}
MAX_DEPTH = 3
MAX_ACTIVE_AGENTS = 4  # per session
MAX_ACTIVE_WRITERS = 2  # per session
CPU = 3  # units of the one resource group

HOLDING = {"queued", "running", "paused", "cancelling"}  # a live pause keeps it (ADR 0058)
LIVE = HOLDING | {"suspended"}
FINISHED = {"ok", "error"}
# The result disposition: which command moves it from where to where.
RESULT_STEPS = {
    "ReadJobResult": ("unread", "read"),
    "AcceptJobResult": ("read", "accepted"),
    "RejectJobResult": ("read", "rejected"),
    "BeginIntegration": ("accepted", "integrating"),
}


class Refused(Exception):
    def __init__(self, code: str, reason: str | None = None) -> None:
        super().__init__(code)
        self.outcome = f"{code}:{reason}" if reason else code


def _path_overlap(a: str, b: str) -> bool:
    """Two scopes overlap when one's path components begin the other's."""
    pa, pb = [p for p in a.split("/") if p], [p for p in b.split("/") if p]
    shorter = min(len(pa), len(pb))
    return pa[:shorter] == pb[:shorter]


@dataclass
class AgentsModel:
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def handle(self, command: c.Command) -> str:
        """``ok`` or ``code`` (``code:reason`` for admission); a refusal changes nothing."""
        saved = copy.deepcopy((self.sessions, self.jobs))
        try:
            getattr(self, type(command).__name__)(command)
        except Refused as refusal:
            self.sessions, self.jobs = saved
            return refusal.outcome
        return "ok"

    # -- counting ------------------------------------------------------------------------------

    def holding(self, **match: Any) -> list[str]:
        return [
            jid
            for jid, job in self.jobs.items()
            if job["state"] in HOLDING and all(job[k] == v for k, v in match.items())
        ]

    def lineage(self, jid: str | None) -> list[str]:
        """``jid`` and every job above it."""
        chain = []
        while jid is not None:
            chain.append(jid)
            jid = self.jobs[jid]["parent"]
        return chain

    def _room(self, agent: str, sid: str, parent: str | None, scope: tuple[str, ...]) -> None:
        """The counted limits, the resource group and the write scopes, for one more holder."""
        if parent is not None:
            limit = ROLES[self.jobs[parent]["agent"]].max_children
            if limit is not None and len(self.holding(parent=parent)) >= limit:
                raise Refused("admission_rejected", "max_children")
        limit = ROLES[agent].max_active
        if limit is not None and len(self.holding(agent=agent)) >= limit:
            raise Refused("admission_rejected", "max_active")
        if len(self.holding(session=sid)) >= MAX_ACTIVE_AGENTS:
            raise Refused("admission_rejected", "max_active_agents")
        if scope and len([j for j in self.holding(session=sid) if self.jobs[j]["scope"]]) >= (
            MAX_ACTIVE_WRITERS
        ):
            raise Refused("admission_rejected", "max_active_writers")

    def _capacity_and_scope(self, group: str | None, units: int, scope: tuple[str, ...]) -> None:
        if group is not None:
            held = sum(self.jobs[j]["units"] for j in self.holding(group=group))
            if held + units > CPU:
                raise Refused("admission_rejected", "capacity")
        taken = [p for j in self.holding() for p in self.jobs[j]["scope"]]
        if any(_path_overlap(mine, theirs) for mine in scope for theirs in taken):
            raise Refused("admission_rejected", "write_scope_conflict")

    def _job(self, jid: str) -> dict[str, Any]:
        if jid not in self.jobs:
            raise Refused("not_found")
        return self.jobs[jid]

    # -- spawning --------------------------------------------------------------------------------

    def AcceptJob(self, cmd: c.AcceptJob) -> None:
        if cmd.job_id in self.jobs:
            raise Refused("already_exists")
        session = self.sessions[cmd.session_id]
        if session["tainted"] or session["state"] != "running":
            raise Refused("conflict")
        depth = 1
        if cmd.parent_job is not None:
            parent = self._job(cmd.parent_job)
            if parent["session"] != cmd.session_id or parent["state"] not in ("queued", "running"):
                raise Refused("conflict")
            depth = parent["depth"] + 1
            if depth > MAX_DEPTH:
                raise Refused("admission_rejected", "depth")
        role = ROLES.get(cmd.agent)
        if role is None or role.writer != bool(cmd.write_scope):
            raise Refused("invalid_argument")
        if cmd.parent_job is not None:
            parent = self.jobs[cmd.parent_job]
            if cmd.caller_token_digest is not None and (
                parent["state"] != "running" or parent["token"] != cmd.caller_token_digest
            ):
                raise Refused("unauthorized")
            if cmd.agent not in ROLES[parent["agent"]].can_spawn:
                raise Refused("forbidden")
            if role.no_ancestor_of_its_kind and cmd.agent in {
                self.jobs[j]["agent"] for j in self.lineage(cmd.parent_job)
            }:
                raise Refused("admission_rejected", "ancestor_role")
        self._room(cmd.agent, cmd.session_id, cmd.parent_job, cmd.write_scope)
        self._capacity_and_scope(cmd.resource_group, cmd.units, cmd.write_scope)
        self.jobs[cmd.job_id] = {
            "state": "queued",
            "session": cmd.session_id,
            "parent": cmd.parent_job,
            "depth": depth,
            "agent": cmd.agent,
            "scope": cmd.write_scope,
            "group": cmd.resource_group,
            "units": cmd.units,
            "token": None,
            "result": None,
            "worktree": None,
            "patch": None,  # the sha256 of the patch it finished with
            "after": None,  # the intent's after tree, while integrating
        }

    def AcceptJobs(self, cmd: c.AcceptJobs) -> None:
        for item in cmd.jobs:  # handle() rolls every earlier item back on a refusal
            self.AcceptJob(item)

    # -- runs ------------------------------------------------------------------------------------

    def _readmit(self, job: dict[str, Any]) -> None:
        self._room(job["agent"], job["session"], job["parent"], job["scope"])
        self._capacity_and_scope(job["group"], job["units"], job["scope"])

    def _step(self, job: dict[str, Any], sources: set[str], dest: str) -> None:
        if job["state"] not in sources:
            raise Refused("invalid_transition")
        job["state"] = dest

    def StartJob(self, cmd: c.StartJob) -> None:
        job = self._job(cmd.job_id)
        if job["scope"] and not cmd.worktree:  # a writer runs in its own git worktree
            raise Refused("admission_rejected", "writable_target_not_git")
        if cmd.resumed and job["worktree"] and cmd.worktree != job["worktree"]:
            raise Refused("conflict")  # a resumed run goes on where the last one worked
        if job["state"] == "suspended":  # relaunch: admitted like new work
            self._readmit(job)
        self._step(job, {"queued", "paused", "suspended"}, "running")
        job["token"] = cmd.token_digest
        job["worktree"] = cmd.worktree or None

    def FinishJob(self, cmd: c.FinishJob) -> None:
        job = self._job(cmd.job_id)
        self._step(job, {"running"}, cmd.outcome)
        job["result"] = "unread"
        job["patch"] = cmd.patch.sha256 if cmd.patch else None

    def PauseJob(self, cmd: pausing.PauseJob) -> None:
        job = self._job(cmd.job_id)
        if job["state"] == "paused":  # only a live pause made cold pauses a paused job
            raise Refused("conflict")
        self._step(job, {"running"}, "paused")

    def ContinueJob(self, cmd: pausing.ContinueJob) -> None:
        self._step(self._job(cmd.job_id), {"paused"}, "running")  # it kept what it held

    def SuspendJob(self, cmd: pausing.SuspendJob) -> None:
        self._step(self._job(cmd.job_id), {"running", "paused"}, "suspended")

    def _cancel_one(self, job: dict[str, Any]) -> None:
        if job["state"] in ("running", "cancelling"):
            job["state"] = "cancelling"  # its runner confirms once the process is gone
        else:
            self._step(job, {"queued", "paused", "suspended"}, "cancelled")

    def CancelJob(self, cmd: c.CancelJob) -> None:
        self._cancel_one(self._job(cmd.job_id))
        for jid, job in self.jobs.items():
            if cmd.job_id in self.lineage(jid)[1:] and job["state"] in LIVE:
                self._cancel_one(job)

    def ConfirmJobCancelled(self, cmd: c.ConfirmJobCancelled) -> None:
        self._step(
            self._job(cmd.job_id), {"cancelling", "queued", "paused", "suspended"}, "cancelled"
        )

    # -- results ---------------------------------------------------------------------------------

    def _judge(self, cmd: Any, needs_ancestor: bool) -> None:
        job = self._job(cmd.job_id)
        if job["state"] not in FINISHED:
            raise Refused("conflict")
        if cmd.caller_job is not None:
            caller = self.jobs.get(cmd.caller_job)
            if (
                caller is None
                or caller["state"] != "running"
                or caller["token"] != (cmd.caller_token_digest or "")
            ):
                raise Refused("unauthorized")
            if caller["session"] != job["session"]:
                raise Refused("forbidden")
            if needs_ancestor and cmd.caller_job not in self.lineage(cmd.job_id)[1:]:
                raise Refused("forbidden")
        name = type(cmd).__name__
        if name == "BeginIntegration":
            if self.sessions[job["session"]]["tainted"]:
                raise Refused("conflict")
            if job["patch"] is None or cmd.sha256 != job["patch"]:
                raise Refused("conflict")  # only the patch the job finished with
            if job["state"] != "ok":
                raise Refused("conflict")  # an error's patch is read, never applied
            if any(
                other["result"] == "integrating"
                for jid, other in self.jobs.items()
                if jid != cmd.job_id
            ):
                raise Refused("conflict")  # one integration of the workspace at a time
            job["after"] = cmd.after_tree
        source, dest = RESULT_STEPS[name]
        if job["result"] != source:
            raise Refused("invalid_transition")
        job["result"] = dest

    def ReadJobResult(self, cmd: c.ReadJobResult) -> None:
        self._judge(cmd, needs_ancestor=False)

    def AcceptJobResult(self, cmd: c.AcceptJobResult) -> None:
        self._judge(cmd, needs_ancestor=True)

    def RejectJobResult(self, cmd: c.RejectJobResult) -> None:
        self._judge(cmd, needs_ancestor=True)

    def BeginIntegration(self, cmd: c.BeginIntegration) -> None:
        self._judge(cmd, needs_ancestor=True)

    def _integrating(self, jid: str) -> dict[str, Any]:
        job = self._job(jid)
        if job["result"] != "integrating":
            raise Refused("invalid_transition")
        return job

    def ConfirmIntegration(self, cmd: c.ConfirmIntegration) -> None:
        job = self._integrating(cmd.job_id)
        if cmd.tree != job["after"]:
            raise Refused("conflict")
        job["result"] = "integrated"

    def UndoIntegration(self, cmd: c.UndoIntegration) -> None:
        self._integrating(cmd.job_id)["result"] = "accepted"

    # -- sessions --------------------------------------------------------------------------------

    def CreateSession(self, cmd: c.CreateSession) -> None:
        self.sessions[cmd.session_id] = {"state": "running", "tainted": False}

    def TaintSession(self, cmd: c.TaintSession) -> None:
        self.sessions[cmd.session_id]["tainted"] = True

    def CancelSession(self, cmd: c.CancelSession) -> None:
        session = self.sessions[cmd.session_id]
        if session["state"] != "running":
            raise Refused("invalid_transition")
        session["state"] = "cancelled"
        for job in self.jobs.values():
            if job["session"] == cmd.session_id and job["state"] in LIVE:
                job["state"] = "cancelled"
