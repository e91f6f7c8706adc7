"""The built-in domain's refusals: what its rules raise besides the log's own errors.

They subclass ``EngineError``, so a caller (and the HTTP adapter) matches them by ``code``
like every other error.
"""

from __future__ import annotations

from engine.errors import EngineError


class NotFound(EngineError, LookupError):
    """The command names an entity that does not exist."""

    code = "not_found"


class AlreadyExists(EngineError):
    """The command would create an entity that exists already."""

    code = "already_exists"


class Conflict(EngineError):
    """The command conflicts with what the entity owes or holds (e.g. the reply pointer)."""

    code = "conflict"


class AdmissionRejected(EngineError):
    """Admission refused the work: ``reason`` is ``capacity``, ``write_scope_conflict``,
    ``depth``, ``ancestor_role``, ``max_children``, ``max_active``, ``max_active_agents``,
    ``max_active_writers`` or ``writable_target_not_git`` (a writer started without a git
    worktree)."""

    code = "admission_rejected"


class LeaseBusy(EngineError):
    """The lease is held by another live holder."""

    code = "lease_busy"


class NotLeaseHolder(EngineError):
    """Renew or release by someone who does not hold the current epoch."""

    code = "not_lease_holder"


class Unauthorized(EngineError):
    """The caller's credential (a run token) does not belong to a live run."""

    code = "unauthorized"


class Forbidden(EngineError):
    """The caller is known but may not do this (its agent cannot spawn that agent, it is not
    an ancestor of the job whose result it judges, the job is in another session)."""

    code = "forbidden"


# -- where an A2A message goes (engine.domain.usecases) ------------------------------------


class NotGranted(Forbidden):
    """A live run asked for a control its agent was not granted on the target's agent
    (ADR 0057): ``grant`` names the missing one."""

    code = "not_granted"


class StaleRevision(EngineError):
    """The control revision a control expected (``If-Match``) is not the job's (ADR 0057);
    nothing was recorded."""

    code = "stale_revision"


class SessionNotFound(NotFound):
    """The message names a session (its A2A context) that does not exist."""

    code = "session_not_found"


class TaskNotFound(NotFound):
    """The task the message names, or its session owes, is not a task of that session."""

    code = "task_not_found"


class TaskEnded(Conflict):
    """The task the message goes to is in a terminal state: it takes no more messages."""

    code = "task_ended"


class TaskMoved(Conflict):
    """The task changed between the plan of a message (its run's stdin) and the write that
    records it; the caller plans again."""

    code = "task_moved"


class SessionMoved(Conflict):
    """The session changed between the plan of an invocation (its run's agent, the prompts on
    its stdin) and the write that records it: another first call created it with its own
    agent, or the job it would supersede ended or was superseded. The caller plans again."""

    code = "session_moved"


# -- a run's live channel (engine.domain.channel) ------------------------------------------


class NoChannel(Conflict):
    """The job takes no control now: it is not running, or its run takes no input."""

    code = "no_channel"


class StaleTurn(Conflict):
    """A steer or interrupt named a turn that is not the run's active one (or none is)."""

    code = "stale_turn"


class UnknownRequest(Conflict):
    """A response names a request the run has not asked, or one answered already."""

    code = "unknown_request"
