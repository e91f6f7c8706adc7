"""Read model: every job, its lineage, run, result and notify record, a writer's worktree,
patch and integration, and what each job event does to its row (written as SQL and in memory
by ``projections.fold``)."""

from __future__ import annotations

from typing import Any

import msgspec

from engine.domain.job import (
    PAUSE_COLD,
    PAUSE_LIVE,
    PAUSE_RETIRED,
    JobAccepted,
    JobCancelled,
    JobCancelRequested,
    JobContinued,
    JobContinueRefused,
    JobControlLost,
    JobControlSent,
    JobFinished,
    JobForked,
    JobNotifyFinished,
    JobNotifyLost,
    JobNotifyStarted,
    JobPaused,
    JobRelaunched,
    JobResumeFailed,
    JobRetired,
    JobSettled,
    JobStarted,
    JobSuperseded,
    JobSuspended,
    JobTurnEnded,
    JobTurnStarted,
)
from engine.domain.result import (
    UNREAD,
    ResultAccepted,
    ResultIntegrated,
    ResultIntegrating,
    ResultIntegrationUndone,
    ResultRead,
    ResultRejected,
)
from engine.domain.retention import EntityRetired
from engine.events import Event, RecordedEvent
from projections.changes import Add, Change, Fold, IfNull, Shape, Update, json_list, update
from projections.fold import FoldedProjection
from projections.retired import retires

TERMINAL = ("ok", "error", "superseded", "cancelled")


def _moved(e: RecordedEvent, job: str, **fields: Any) -> Update:
    """Every job event moves state, version and updated_at; most set more columns."""
    return update(job, state=e.state, version=e.version, updated_at=e.recorded_at, **fields)


# The three events of every job are shaped: the audit refolds millions of them.
_ACCEPTED = Shape(
    "session_id", "state", "version", "accepted_position", "agent", "prompt_file",
    "command_id", "parent_job", "depth", "batch", "resource_group", "units", "write_scope",
    "task_id", "covers", "agent_ignored", "forked_from", "created_at", "updated_at",
)  # fmt: skip
_STARTED = Shape(
    "state", "version", "updated_at", "run_id", "pid", "start_token", "epoch", "token_digest",
    "paused_by", "worktree", "base_commit", "input", "turn", "pause", runs=Add,
    started_at=IfNull,
)  # fmt: skip
_FINISHED = Shape(
    "state", "version", "updated_at", "result", "files", "exit_code", "warnings",
    "finished_at", "result_state", "patch_sha256", "patch_size", "patch_paths", "patch_base",
    "outcome", "contract_valid", "contract_errors",
)  # fmt: skip


@_ACCEPTED.inserts
def accepted(e: RecordedEvent, job: str) -> tuple[Any, ...]:
    ev: Any = e.event
    at = e.recorded_at
    return (
        job, ev.session, e.state, e.version, e.position, ev.agent, ev.prompt_file,
        e.command_id, ev.parent_job, ev.depth, ev.batch, ev.resource_group, ev.units,
        json_list(ev.write_scope), ev.task, json_list(ev.covers), ev.agent_ignored or None,
        ev.forked_from, at, at,
    )  # fmt: skip


@_STARTED.updates
def started(e: RecordedEvent, job: str) -> tuple[Any, ...]:
    ev: Any = e.event
    at = e.recorded_at
    # A resumed start records the worktree (and base commit) it goes on in: the rule made
    # them the recorded ones, so the row keeps them.
    return (
        job, e.state, e.version, at, ev.run_id, ev.pid, ev.start_token, ev.epoch,
        ev.token_digest, None, ev.worktree or None, ev.base_commit or None, ev.input or None,
        None, None, 1, at,
    )  # fmt: skip


@_FINISHED.updates
def finished(e: RecordedEvent, job: str) -> tuple[Any, ...]:
    ev: Any = e.event
    at = e.recorded_at
    files = msgspec.json.encode(ev.files).decode() if ev.files else "[]"
    # A settling job's run ended, the job did not: it is finished when it settles (ADR 0050).
    finished_at = None if ev.settling else at
    patch = ev.patch
    valid = None if ev.contract_valid is None else int(ev.contract_valid)  # PostgreSQL: no bool
    contract = (valid, json_list(ev.contract_errors))
    if patch is None:
        return (
            job, e.state, e.version, at, ev.result, files, ev.exit_code,
            json_list(ev.warnings), finished_at, UNREAD, None, None, None, None, ev.outcome,
            *contract,
        )  # fmt: skip
    return (
        job, e.state, e.version, at, ev.result, files, ev.exit_code, json_list(ev.warnings),
        finished_at, UNREAD, patch.sha256, patch.size, json_list(patch.paths),
        patch.base_commit, ev.outcome, *contract,
    )  # fmt: skip


def settled(e: RecordedEvent, job: str) -> Change:
    return _moved(e, job, finished_at=e.recorded_at)


def superseded(e: RecordedEvent, job: str) -> Change:
    return _moved(e, job, superseded_by=e.event.superseded_by, finished_at=e.recorded_at)  # type: ignore[attr-defined]


# A control recorded on the job moves its control revision by exactly one (ADR 0057); output,
# the run's signals (``job.signalled``) and the job's own lifecycle (start, finish, suspend,
# a cold pause's run retired, a refused continue) never do.
_CONTROL = Add(1)


def paused(e: RecordedEvent, job: str) -> Change:
    ev: Any = e.event
    pause = PAUSE_COLD if ev.mode == PAUSE_COLD else PAUSE_LIVE
    grace = ev.grace_s if pause == PAUSE_COLD else None
    return _moved(
        e,
        job,
        paused_by=ev.by or None,
        pause=pause,
        pause_grace_s=grace,
        control_revision=_CONTROL,
    )


def continued(e: RecordedEvent, job: str) -> Change:
    return _moved(e, job, pause=None, pause_grace_s=None, control_revision=_CONTROL)


def retired(e: RecordedEvent, job: str) -> Change:
    # A cold pause's run is gone: the job stays paused and holds nothing (ADR 0058). Its
    # lifecycle, not a control: the control revision stays.
    ev: Any = e.event
    return _moved(e, job, pause=PAUSE_RETIRED, reason=ev.reason or None, exit_code=ev.exit_code)


def suspended(e: RecordedEvent, job: str) -> Change:
    # A run lost to a signal records its (negative) exit code; a pause it had is over.
    ev: Any = e.event
    lost = {"exit_code": ev.exit_code} if ev.exit_code is not None else {}
    return _moved(e, job, reason=ev.reason or None, pause=None, pause_grace_s=None, **lost)


def continue_refused(e: RecordedEvent, job: str) -> Change:
    # The job did not move, and its reason stays why it stopped (recovery reads it): the
    # refusal is the event's to tell, and no control was recorded (the revision stays).
    return update(job, updated_at=e.recorded_at)


def cancel_requested(e: RecordedEvent, job: str) -> Change:
    return _moved(e, job, reason=e.event.reason or None, control_revision=_CONTROL)  # type: ignore[attr-defined]


def controlled(e: RecordedEvent, job: str) -> Change:
    # A channel control (job.control), a fork of this job, or a continue that relaunches it:
    # the revision moves; the row's state and version stay (as a turn's do).
    return update(job, control_revision=_CONTROL, updated_at=e.recorded_at)


def resume_failed(e: RecordedEvent, job: str) -> Change:
    reason = e.event.reason  # type: ignore[attr-defined]
    return _moved(e, job, result=reason, reason=reason, finished_at=e.recorded_at)


def cancelled(e: RecordedEvent, job: str) -> Change:
    ev: Any = e.event
    reason = ev.reason or None
    fields: dict[str, Any] = {"reason": reason} if reason else {}
    if not ev.confirms:  # cancelled at once by a control, not confirming a requested cancel
        fields["control_revision"] = _CONTROL
    return _moved(e, job, finished_at=e.recorded_at, **fields)


def turn_started(e: RecordedEvent, job: str) -> Change:
    # The channel's events leave state and version alone, as output does: a turn is the
    # run's to report, not a move of the job.
    return update(job, turn=e.event.turn, updated_at=e.recorded_at)  # type: ignore[attr-defined]


def turn_ended(e: RecordedEvent, job: str) -> Change:
    # The rule records only the active turn's end.
    return update(job, turn=None, updated_at=e.recorded_at)


def input_closed(e: RecordedEvent, job: str) -> Change:
    # A control lost on its way: the run closed its stdin, so it takes no more (until the
    # job's next run, whose start records its input again).
    return update(job, input=None, updated_at=e.recorded_at)


def notify_started(e: RecordedEvent, job: str) -> Change:
    return _moved(e, job, notify_pid=e.event.pid)  # type: ignore[attr-defined]


def notify_finished(e: RecordedEvent, job: str) -> Change:
    ev: Any = e.event
    return _moved(
        e,
        job,
        notify_exit_code=ev.exit_code,
        notify_ms=ev.ms,
        notify_stdout=ev.stdout_tail,
        notify_stderr=ev.stderr_tail,
    )


def notify_lost(e: RecordedEvent, job: str) -> Change:
    # A hook that ended without an exit code: lost to a crash (a hook killed at its cap
    # has one). Kept in the version-2 columns, so no refold of existing logs is needed.
    return _moved(e, job, notify_exit_code=None, notify_ms=0, notify_stderr=e.event.reason)  # type: ignore[attr-defined]


def result(e: RecordedEvent, job: str) -> Change:
    # The result stream is a sub-state: it moves result_* only, never the job's own state
    # and version (those belong to the job stream). A reason or digest left out keeps the
    # one recorded before.
    ev: Any = e.event
    values: dict[str, Any] = {"result_state": e.state, "updated_at": e.recorded_at}
    if (reason := getattr(ev, "reason", None)) is not None:
        values["result_reason"] = reason
    if (sha256 := getattr(ev, "sha256", None)) is not None:
        values["result_sha256"] = sha256
    return update(job, **values)


def integrating(e: RecordedEvent, job: str) -> Change:
    # The intent is what recovery reads while the result is integrating; it stays after the
    # result is confirmed or undone, as the latest one.
    ev: Any = e.event
    return update(
        job,
        result_state=e.state,
        updated_at=e.recorded_at,
        result_sha256=ev.sha256,
        integration_by=ev.by,
        integration_before=ev.before_tree,
        integration_after=ev.after_tree,
        integration_paths=json_list(ev.paths),
    )


def integrated(e: RecordedEvent, job: str) -> Change:
    ev: Any = e.event
    return update(
        job,
        result_state=e.state,
        updated_at=e.recorded_at,
        result_sha256=ev.sha256,
        integrated_tree=ev.tree or None,  # "" in logs written before the intent existed
    )


def integration_undone(e: RecordedEvent, job: str) -> Change:
    # Back to accepted; the reason an accept or reject gave stays the result's reason.
    return update(job, result_state=e.state, updated_at=e.recorded_at)


FOLDS: dict[type[Event], Fold] = {
    JobAccepted: accepted,
    JobStarted: started,
    JobFinished: finished,
    JobSettled: settled,
    JobSuperseded: superseded,
    JobPaused: paused,
    JobContinued: continued,
    JobRetired: retired,
    JobContinueRefused: continue_refused,
    JobSuspended: suspended,
    JobResumeFailed: resume_failed,
    JobCancelRequested: cancel_requested,
    JobControlSent: controlled,
    JobForked: controlled,
    JobRelaunched: controlled,
    JobCancelled: cancelled,
    JobTurnStarted: turn_started,
    JobTurnEnded: turn_ended,
    JobControlLost: input_closed,
    JobNotifyStarted: notify_started,
    JobNotifyFinished: notify_finished,
    JobNotifyLost: notify_lost,
    ResultRead: result,
    ResultAccepted: result,
    ResultRejected: result,
    ResultIntegrating: integrating,
    ResultIntegrated: integrated,
    ResultIntegrationUndone: integration_undone,
    EntityRetired: retires("job"),  # a retention policy retired the ended job's row
}


class JobsProjection(FoldedProjection):
    name = "jobs"
    # 2: task_id column; 3: run token digest and result disposition; 4: a writer's worktree,
    # its patch and the integration intent (issue 28); 5: the run's input and active turn;
    # 6: the run's outcome, kept while the job settles (ADR 0050); 7: the jobs a root job
    # covers and the agent its caller named in vain (ADR 0048); 8: how a paused job is
    # paused, and a cold pause's grace (ADR 0058); 9: the control revision and the job a fork
    # forks (ADR 0057); 10: the output-contract verdict (ADR 0065)
    version = 10
    tables = ("jobs",)
    folds_by_entity = True  # every row from its own entity's streams
    ddl = """
        CREATE TABLE jobs (
            job_id            TEXT    PRIMARY KEY,
            session_id        TEXT    NOT NULL,
            state             TEXT    NOT NULL,
            version           INTEGER NOT NULL,
            control_revision  INTEGER NOT NULL DEFAULT 0,
            accepted_position INTEGER NOT NULL,
            agent             TEXT    NOT NULL,
            prompt_file       TEXT    NOT NULL,
            command_id        TEXT,
            parent_job        TEXT,
            depth             INTEGER NOT NULL,
            batch             TEXT,
            resource_group    TEXT,
            units             INTEGER NOT NULL,
            write_scope       TEXT    NOT NULL,
            task_id           TEXT,
            covers            TEXT    NOT NULL DEFAULT '[]',
            agent_ignored     TEXT,
            forked_from       TEXT,
            run_id            TEXT,
            pid               INTEGER,
            start_token       TEXT,
            epoch             INTEGER,
            runs              INTEGER NOT NULL DEFAULT 0,
            result            TEXT,
            files             TEXT    NOT NULL DEFAULT '[]',
            exit_code         INTEGER,
            warnings          TEXT    NOT NULL DEFAULT '[]',
            token_digest      TEXT,
            paused_by         TEXT,
            result_state      TEXT,
            result_reason     TEXT,
            result_sha256     TEXT,
            worktree          TEXT,
            base_commit       TEXT,
            input             TEXT,
            turn              TEXT,
            patch_sha256      TEXT,
            patch_size        INTEGER,
            patch_paths       TEXT,
            patch_base        TEXT,
            integration_by    TEXT,
            integration_before TEXT,
            integration_after TEXT,
            integration_paths TEXT,
            integrated_tree   TEXT,
            outcome           TEXT,
            pause             TEXT,
            pause_grace_s     INTEGER,
            contract_valid    INTEGER,
            contract_errors   TEXT    NOT NULL DEFAULT '[]',
            superseded_by     TEXT,
            reason            TEXT,
            notify_pid        INTEGER,
            notify_exit_code  INTEGER,
            notify_ms         INTEGER,
            notify_stdout     TEXT,
            notify_stderr     TEXT,
            created_at        TEXT    NOT NULL,
            started_at        TEXT,
            finished_at       TEXT,
            updated_at        TEXT    NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX jobs_by_session ON jobs (session_id, state);
        CREATE INDEX jobs_by_state ON jobs (state, updated_at);
        CREATE INDEX jobs_by_parent ON jobs (parent_job);
        CREATE INDEX jobs_by_group ON jobs (resource_group, state);
        CREATE INDEX jobs_by_command ON jobs (command_id);
        CREATE INDEX jobs_by_task ON jobs (task_id) WHERE task_id IS NOT NULL;
        CREATE INDEX jobs_by_token ON jobs (token_digest) WHERE token_digest IS NOT NULL;
        CREATE INDEX jobs_by_update ON jobs (updated_at);
        CREATE INDEX jobs_notifying ON jobs (job_id)
            WHERE notify_pid IS NOT NULL AND notify_ms IS NULL;
        CREATE INDEX jobs_by_result ON jobs (result_state) WHERE result_state IS NOT NULL;
        CREATE INDEX jobs_by_worktree ON jobs (state) WHERE worktree IS NOT NULL;
    """

    key = ("job_id",)
    folds = FOLDS
