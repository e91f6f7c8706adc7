"""A small reference model of the domain rules, written from design.md §4.2-§4.7 with dicts.

It knows nothing of SQL, events or the engine's code: the stateful test drives it and the real
engine with the same commands and checks that they agree on every outcome and every row.
"""

from __future__ import annotations

import copy
from typing import Any

from engine.domain import commands as c
from engine.domain import pausing
from tests.unit.test_domain_machines import SPEC

SESSION_HOLDS = {"starting", "running", "detached", "finishing", "stopping", "cancelling"}
# A paused job keeps what it held (ADR 0058: the model pauses live only; a cold pause's
# retirement is in tests/unit/test_pause_rules.py).
JOB_HOLDS = {"queued", "running", "paused", "cancelling"}
JOB_LIVE = {"queued", "running", "paused", "suspended", "cancelling", "settling"}
SESSION_TERMINAL = {"completed", "failed", "stopped", "cancelled"}
TASK_OPEN = {"submitted", "working", "input-required", "auth-required"}
FINISHED = {"ok", "error"}


class Refused(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


# The agents the model knows: name -> (can_spawn, max_children, max_active). "" is the default.
AGENTS: dict[str, tuple[tuple[str, ...], int | None, int | None]] = {
    "": (("",), None, None),
    "boss": (("w",), 1, None),
    "w": ((), None, 2),
}
MAX_ACTIVE_AGENTS = 3  # per session


class DomainModel:
    def __init__(self, limits: dict[str, int], max_depth: int) -> None:
        self.limits = limits
        self.max_depth = max_depth
        self.sessions: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.tasks: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []  # job ids in acceptance order
        self.commands: set[str] = set()

    # -- plumbing ----------------------------------------------------------------------------

    def handle(self, command: c.Command) -> str:
        """``ok``, ``duplicate`` or the error code; a refusal changes nothing."""
        if command.command_id is not None and command.command_id in self.commands:
            return "duplicate"
        saved = copy.deepcopy((self.sessions, self.jobs, self.tasks, self.order))
        try:
            getattr(self, type(command).__name__)(command)
            self._quiet()
        except Refused as refusal:
            self.sessions, self.jobs, self.tasks, self.order = saved
            return refusal.code
        if command.command_id is not None:
            self.commands.add(command.command_id)
        return "ok"

    @staticmethod
    def _move(kind: str, entity: dict[str, Any], event_type: str, dest: str | None = None) -> None:
        sources, dests = SPEC[kind][event_type]
        if entity["state"] not in sources:
            raise Refused("invalid_transition")
        target = dest or next(iter(dests))
        if target != "=":
            entity["state"] = target

    def _get(self, table: dict[str, dict[str, Any]], key: str) -> dict[str, Any]:
        if key not in table:
            raise Refused("not_found")
        return table[key]

    def _held(self, group: str) -> int:
        return sum(
            s["units"]
            for s in self.sessions.values()
            if s["group"] == group and s["state"] in SESSION_HOLDS
        ) + sum(
            j["units"]
            for j in self.jobs.values()
            if j["group"] == group and j["state"] in JOB_HOLDS
        )

    def _admit(self, group: str | None, units: int) -> None:
        if group is None:
            return
        if group not in self.limits:
            raise Refused("invalid_argument")
        if self._held(group) + units > self.limits[group]:
            raise Refused("admission_rejected")

    def _holding(self, **match: Any) -> int:
        return sum(
            1
            for j in self.jobs.values()
            if j["state"] in JOB_HOLDS and all(j[k] == v for k, v in match.items())
        )

    def _counts(self, agent: str, sid: str, parent: str | None) -> None:
        """roles.check_counts: parent's max_children, agent's max_active, session's agents."""
        if parent is not None:
            limit = AGENTS[self.jobs[parent]["agent"]][1]
            if limit is not None and self._holding(parent=parent) + 1 > limit:
                raise Refused("admission_rejected")
        limit = AGENTS[agent][2]
        if limit is not None and self._holding(agent=agent) + 1 > limit:
            raise Refused("admission_rejected")
        if self._holding(session=sid) + 1 > MAX_ACTIVE_AGENTS:
            raise Refused("admission_rejected")

    def _settle(self, sid: str, owed: tuple[str, str]) -> None:
        session = self.sessions.get(sid)
        if session and session["owes"] == owed and session["state"] not in SESSION_TERMINAL:
            session["owes"] = None

    def _point(self, session: dict[str, Any], owed: tuple[str, str]) -> None:
        if session["owes"] and session["owes"][0] in ("a2a", "relay"):
            raise Refused("conflict")
        if session["owes"] and session["owes"][0] == "job":
            earlier = self.jobs.get(session["owes"][1])
            if earlier and earlier["state"] in JOB_LIVE - {"cancelling"}:
                self._move("job", earlier, "job.superseded")
                earlier["superseded_by"] = owed[1] if owed[0] == "job" else f"{owed[0]}:{owed[1]}"
        self._move("session", session, "session.owes")
        session["owes"] = owed

    def _quiet(self) -> None:
        """The quiet gate (ADR 0050): a settling job whose subtree is quiet ends as its run
        did, and settles its session's pointer."""
        for jid in self.order:
            job = self.jobs[jid]
            if job["state"] == "settling" and not self._descendants(jid):
                job["state"] = job["outcome"]
                self._settle(job["session"], ("job", jid))

    def _end_work(self, sid: str) -> None:
        """A session becoming terminal takes its live jobs and open tasks with it, and owes
        nothing any more."""
        for job in self.jobs.values():
            if job["session"] == sid and job["state"] in JOB_LIVE:
                job["state"] = "cancelled"
        for task in self.tasks.values():
            if task["session"] == sid and task["state"] in TASK_OPEN:
                task["state"] = "canceled"
        self.sessions[sid]["owes"] = None

    # -- sessions ----------------------------------------------------------------------------

    def CreateSession(self, cmd: c.CreateSession) -> None:
        if cmd.session_id in self.sessions:
            raise Refused("already_exists")
        self._admit(cmd.resource_group, cmd.units)
        self.sessions[cmd.session_id] = {
            "state": "running" if cmd.start_run_id else "starting",
            "group": cmd.resource_group,
            "units": cmd.units,
            "tainted": False,
            "owes": None,
            "detached_by": None,
        }

    def PauseSession(self, cmd: c.PauseSession) -> None:
        session = self._get(self.sessions, cmd.session_id)
        self._move("session", session, "session.paused")
        for job in self.jobs.values():
            if job["session"] == cmd.session_id and job["state"] == "running":
                job["state"] = "paused"

    def DetachSession(self, cmd: c.DetachSession) -> None:
        session = self._get(self.sessions, cmd.session_id)
        self._move("session", session, "session.detached")
        session["detached_by"] = cmd.by

    def AttachSession(self, cmd: c.AttachSession) -> None:
        session = self._get(self.sessions, cmd.session_id)
        if session["state"] in ("paused", "suspended"):
            self._admit(session["group"], session["units"])
        self._move("session", session, "session.attached")
        session["detached_by"] = None

    def ResumeSession(self, cmd: c.ResumeSession) -> None:
        session = self._get(self.sessions, cmd.session_id)
        if (
            session["tainted"]
            and not cmd.allow_tainted
            and session["state"] not in SESSION_TERMINAL
        ):
            raise Refused("conflict")
        if session["state"] in ("paused", "suspended"):
            self._admit(session["group"], session["units"])
        self._move("session", session, "session.resumed")
        session["detached_by"] = None

    def TaintSession(self, cmd: c.TaintSession) -> None:
        session = self._get(self.sessions, cmd.session_id)
        session["tainted"] = True

    def FinishSession(self, cmd: c.FinishSession) -> None:
        session = self._get(self.sessions, cmd.session_id)
        if session["state"] == "detached" and session["detached_by"] == "operator":
            raise Refused("invalid_transition")
        if session["state"] != "finishing":
            self._move("session", session, "session.finishing")
            session["requested"] = cmd.requested
        recoverable = [
            j
            for j in self.jobs.values()
            if j["session"] == cmd.session_id and j["state"] in JOB_LIVE - {"cancelling"}
        ]
        if recoverable:
            session["state"], session["detached_by"] = "detached", None
            return
        self._end_work(cmd.session_id)
        session["state"] = session["requested"]

    def _close(self, sid: str, closing: str, closed: str, wait: bool) -> None:
        session = self._get(self.sessions, sid)
        if session["state"] != closing:
            self._move("session", session, f"session.{closing}")
            if wait:
                return
        self._end_work(sid)
        session["state"] = closed

    def StopSession(self, cmd: c.StopSession) -> None:
        self._close(cmd.session_id, "stopping", "stopped", cmd.wait)

    def CancelSession(self, cmd: c.CancelSession) -> None:
        self._close(cmd.session_id, "cancelling", "cancelled", cmd.wait)

    def OweRelay(self, cmd: c.OweRelay) -> None:
        self._point(self._get(self.sessions, cmd.session_id), ("relay", cmd.to_session))

    def SettleRelay(self, cmd: c.SettleRelay) -> None:
        session = self._get(self.sessions, cmd.session_id)
        if not session["owes"] or session["owes"][0] != "relay":
            raise Refused("conflict")
        self._move("session", session, "session.settled")
        session["owes"] = None

    # -- jobs --------------------------------------------------------------------------------

    def AcceptJob(self, cmd: c.AcceptJob) -> None:
        if cmd.job_id in self.jobs:
            raise Refused("already_exists")
        session = self._get(self.sessions, cmd.session_id)
        if session["tainted"] or session["state"] not in ("starting", "running", "detached"):
            raise Refused("conflict")
        depth = 1
        if cmd.parent_job is not None:
            parent = self._get(self.jobs, cmd.parent_job)
            if parent["session"] != cmd.session_id or parent["state"] not in ("queued", "running"):
                raise Refused("conflict")
            depth = parent["depth"] + 1
            if depth > self.max_depth:
                raise Refused("admission_rejected")
        if cmd.agent not in AGENTS:
            raise Refused("invalid_argument")
        parent_agent = self.jobs[cmd.parent_job]["agent"] if cmd.parent_job else None
        if parent_agent is not None and cmd.agent not in AGENTS[parent_agent][0]:
            raise Refused("forbidden")
        self._counts(cmd.agent, cmd.session_id, cmd.parent_job)
        self._admit(cmd.resource_group, cmd.units)
        if cmd.owed:
            self._point(session, ("job", cmd.job_id))
        self.jobs[cmd.job_id] = {
            "state": "queued",
            "session": cmd.session_id,
            "depth": depth,
            "group": cmd.resource_group,
            "units": cmd.units,
            "parent": cmd.parent_job,
            "superseded_by": None,
            "agent": cmd.agent,
            # unread | read | accepted | rejected | integrating | integrated once finished
            "result": None,
            "scope": cmd.write_scope,
            "patch": None,  # the sha256 of the patch it finished with
            "after": None,  # the integration intent's after tree
        }
        self.order.append(cmd.job_id)

    def StartJob(self, cmd: c.StartJob) -> None:
        job = self._get(self.jobs, cmd.job_id)
        if job["scope"] and not cmd.worktree:  # a writer runs in its own git worktree
            raise Refused("admission_rejected")
        if job["state"] == "suspended":  # it released what it held; a live pause did not
            self._counts(job["agent"], job["session"], job["parent"])
            self._admit(job["group"], job["units"])
        self._move("job", job, "job.started")

    def FinishJob(self, cmd: c.FinishJob) -> None:
        job = self._get(self.jobs, cmd.job_id)
        # The quiet gate (ADR 0050): the job its session owes waits for its live subtree.
        owed = self.sessions[job["session"]]["owes"] == ("job", cmd.job_id)
        settling = owed and bool(self._descendants(cmd.job_id))
        self._move("job", job, "job.finished", "settling" if settling else cmd.outcome)
        job["outcome"] = cmd.outcome
        job["result"] = "unread"
        job["patch"] = cmd.patch.sha256 if cmd.patch else None
        if not settling:
            self._settle(job["session"], ("job", cmd.job_id))

    def PauseJob(self, cmd: pausing.PauseJob) -> None:
        job = self._get(self.jobs, cmd.job_id)
        if job["state"] == "paused":  # only a live pause made cold pauses a paused job
            raise Refused("conflict")
        self._move("job", job, "job.paused")

    def ContinueJob(self, cmd: pausing.ContinueJob) -> None:
        job = self._get(self.jobs, cmd.job_id)
        self._move("job", job, "job.continued")

    def SuspendJob(self, cmd: pausing.SuspendJob) -> None:
        self._move("job", self._get(self.jobs, cmd.job_id), "job.suspended")

    def _descendants(self, jid: str) -> list[str]:
        found, frontier = [], [jid]
        while frontier:
            parent = frontier.pop(0)
            children = [k for k in self.order if self.jobs[k]["parent"] == parent]
            found += children
            frontier += children
        return [k for k in found if self.jobs[k]["state"] in JOB_LIVE]

    def _cancel(self, jid: str) -> None:
        job = self.jobs[jid]
        if job["state"] in ("running", "cancelling"):
            self._move("job", job, "job.cancel_requested")
        else:
            self._move("job", job, "job.cancelled")
            self._settle(job["session"], ("job", jid))

    def CancelJob(self, cmd: c.CancelJob) -> None:
        self._get(self.jobs, cmd.job_id)
        below = self._descendants(cmd.job_id)
        self._cancel(cmd.job_id)
        for jid in below:
            self._cancel(jid)

    def ConfirmJobCancelled(self, cmd: c.ConfirmJobCancelled) -> None:
        job = self._get(self.jobs, cmd.job_id)
        self._move("job", job, "job.cancelled")
        self._settle(job["session"], ("job", cmd.job_id))

    # -- results (the operator judges) ---------------------------------------------------------

    def _judge(
        self, jid: str, sources: tuple[str, ...], dest: str, sha256: str | None = None
    ) -> dict[str, Any]:
        job = self._get(self.jobs, jid)
        if job["state"] not in FINISHED:
            raise Refused("conflict")
        if dest == "integrating" and (
            self.sessions[job["session"]]["tainted"]
            or job["patch"] is None  # nothing to integrate
            or job["state"] != "ok"  # an error's patch is read, never applied
            or sha256 != job["patch"]  # only the patch the job finished with
            or any(j["result"] == "integrating" for k, j in self.jobs.items() if k != jid)
        ):
            raise Refused("conflict")
        if job["result"] not in sources:
            raise Refused("invalid_transition")
        job["result"] = dest
        return job

    def ReadJobResult(self, cmd: c.ReadJobResult) -> None:
        self._judge(cmd.job_id, ("unread",), "read")

    def AcceptJobResult(self, cmd: c.AcceptJobResult) -> None:
        self._judge(cmd.job_id, ("read",), "accepted")

    def RejectJobResult(self, cmd: c.RejectJobResult) -> None:
        self._judge(cmd.job_id, ("read",), "rejected")

    def BeginIntegration(self, cmd: c.BeginIntegration) -> None:
        job = self._judge(cmd.job_id, ("accepted",), "integrating", cmd.sha256)
        job["after"] = cmd.after_tree

    def _integrating(self, jid: str) -> dict[str, Any]:
        job = self._get(self.jobs, jid)
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

    # -- tasks -------------------------------------------------------------------------------

    def CreateTask(self, cmd: c.CreateTask) -> None:
        if cmd.task_id in self.tasks:
            raise Refused("already_exists")
        session = self._get(self.sessions, cmd.session_id)
        if session["tainted"] or session["state"] not in ("starting", "running", "detached"):
            raise Refused("conflict")
        self._point(session, ("a2a", cmd.task_id))
        self.tasks[cmd.task_id] = {"state": "submitted", "session": cmd.session_id}

    def _end_task(self, tid: str, event_type: str) -> None:
        task = self._get(self.tasks, tid)
        self._move("task", task, event_type)
        self._settle(task["session"], ("a2a", tid))

    def CompleteTask(self, cmd: c.CompleteTask) -> None:
        self._end_task(cmd.task_id, "task.completed")

    def CancelTask(self, cmd: c.CancelTask) -> None:
        self._end_task(cmd.task_id, "task.canceled")

    def UpdateTaskStatus(self, cmd: c.UpdateTaskStatus) -> None:
        self._move("task", self._get(self.tasks, cmd.task_id), "task.status_updated")
