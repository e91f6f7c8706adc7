"""What the domain rules read, and what every reader of the read models gets: one row type per
entity, and the queries admission needs.

Each row holds its read model's columns in the shape a caller uses them (JSON text decoded, the
owed pair as one ``Owed``), in one order: the fields ``/v1`` answers first, in the order it
answers them, then the ones only the domain and the adapters read (a run's token digest, a
write scope, the controller's process). ``projections.rows`` is the one way a row is selected
and decoded; ``adapters.http.schemas`` derives each wire body from its row with ``wire``.

``DomainView`` is the port the rules are written against; ``projections.view`` implements it
with SQL over the read models, inside the write transaction, so every decision sees exactly
what has been committed before it plus what the same transaction appended.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from engine.domain import ids
from engine.domain.answer import Artifact, Part
from engine.domain.job import TERMINAL as JOB_TERMINAL
from engine.domain.job import FileEntry, PatchEntry
from engine.domain.session import Owed


class LeaseRow(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    state: str
    version: int
    holder: str
    host: str
    pid: int
    epoch: int
    acquired_at: str
    renewed_at: str
    # -- not on the wire
    updated_at: str


class SessionRow(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    state: str
    version: int
    agent: str
    origin: str
    resource_group: str | None
    units: int
    has_controller: bool
    run_id: str | None
    tainted: bool
    taint_reasons: tuple[str, ...]
    owes: Owed | None
    detached_by: str | None
    created_at: str
    updated_at: str
    finished_at: str | None
    # -- not on the wire
    requested: str | None  # what the finishing session was asked to end as
    error: str | None
    pid: int | None  # the controller's process, while it runs
    start_token: str | None


class Integration(msgspec.Struct, frozen=True, kw_only=True):
    """A result's integration intent as recorded: who asked (``operator`` or a job id), the
    working tree's git tree ids ``before`` and ``after`` the patch, and the paths it writes."""

    by: str
    before: str
    after: str
    paths: tuple[str, ...]


class JobRow(msgspec.Struct, frozen=True, kw_only=True):
    job_id: str
    session_id: str
    state: str
    version: int
    # How many controls were recorded on it (ADR 0057): what ``If-Match`` on a control names.
    control_revision: int
    agent: str  # the agent its runs run: a root job's is its session's (ADR 0048)
    agent_ignored: str | None  # the agent its caller named instead, overridden by the session's
    parent_job: str | None
    depth: int
    batch: str | None
    resource_group: str | None
    units: int
    task_id: str | None
    # The owed jobs it superseded whose prompts its runs get before its own, oldest first.
    covers: tuple[str, ...]
    forked_from: str | None  # the job it forks (ADR 0057)
    run_id: str | None  # the current run
    pid: int | None
    runs: int
    result: str | None
    files: tuple[FileEntry, ...]
    exit_code: int | None
    superseded_by: str | None
    reason: str | None
    notify_exit_code: int | None
    # The notify hook started before a crash and never finished: reported, not run again.
    notify_lost: bool
    warnings: tuple[str, ...]  # the run's WARNING: lines: an ok "completed with warnings"
    # engine.domain.result, once finished: unread | read | accepted | rejected | integrating |
    # integrated
    result_state: str | None
    result_reason: str | None  # why it was accepted or rejected
    result_sha256: str | None  # of the patch being integrated or integrated
    patch: PatchEntry | None  # what a writer's run changed, captured when it finished
    # The live channel (ADR 0038): "lines" if the current run takes controls while it runs,
    # the turn it said is active, and how many of its requests for input wait for an answer.
    input: str | None
    turn: str | None
    pending_requests: int
    created_at: str
    started_at: str | None
    finished_at: str | None
    updated_at: str
    # How a paused job is paused (ADR 0058): ``live`` (its group stopped, holding its units),
    # ``cold`` (its run finalizing before its group ends), ``retired`` (its run gone, holding
    # nothing); None when it is not paused.
    pause: str | None = None
    # -- not on the wire
    write_scope: tuple[str, ...]
    command_id: str | None
    token_digest: str | None  # of the current run's token
    start_token: str | None
    paused_by: str | None
    worktree: str | None  # the git worktree (absolute) its latest start named: a writer's
    base_commit: str | None  # the commit that worktree was made at
    # The latest integration intent (result.integrating): what recovery compares the working
    # tree with while the result is ``integrating``.
    integration: Integration | None
    integrated_tree: str | None  # the working tree's git tree id once integrated
    # How its run ended (``ok`` or ``error``), once it did: what a settling job ends as
    # when its subtree is quiet (ADR 0050).
    outcome: str | None = None
    pause_grace_s: int | None = None  # a cold pause's grace: its run's group ends after it
    # Its finish's output-contract verdict (ADR 0065): None when it was not judged.
    contract_valid: bool | None = None
    contract_errors: tuple[str, ...] = ()

    @property
    def caller_id(self) -> str | None:
        """The ``id`` the ``/invocations`` caller gave, if it came from there."""
        return ids.invocation_key(self.command_id)

    @property
    def terminal(self) -> bool:
        return self.state in JOB_TERMINAL


class TaskRow(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    session_id: str
    state: str
    version: int
    message_id: str
    text: str
    status_text: str | None
    result: str | None
    created_at: str
    updated_at: str
    # -- not on the wire
    followups: tuple[tuple[str, str], ...]  # the messages after the first: (message id, text)
    files: tuple[FileEntry, ...] = ()  # a completed task's MEDIA: files, as its job recorded them
    artifacts: tuple[Artifact, ...] = ()  # its runs' own artifacts (ADR 0054)
    reply: tuple[Part, ...] | None = None  # the direct message it completed with (ADR 0054)
    structured: bool = False  # its result is JSON its contract accepted (ADR 0065)

    def messages(self) -> list[tuple[str, str]]:
        """Every message of the task, in order: (message id, text)."""
        return [(self.message_id, self.text), *self.followups]


class PushConfigRow(msgspec.Struct, frozen=True, kw_only=True):
    """A task's push config (ADR 0039); ``position`` is the log position of the event that set
    it, ``last_state`` the task state it was last told of (or was made in)."""

    task_id: str
    config_id: str
    url: str
    token: str
    scheme: str
    credentials: str
    dialect: str
    position: int
    last_state: str


class DeliveryRow(msgspec.Struct, frozen=True, kw_only=True):
    """One owed push notification (the outbox, ADR 0039): the transition it tells of (``cause``
    position, the task's ``task_state`` and ``status_text`` then, ``at`` its time), where it
    goes (copied from its config when it was owed), and how far its delivery got: ``progress``
    ``queued`` (never tried), ``sending``, ``waiting``, ``delivered`` or ``dead``."""

    delivery_id: str
    task_id: str
    config_id: str
    cause: int
    task_state: str
    status_text: str | None
    at: str
    url: str
    token: str
    scheme: str
    credentials: str
    dialect: str
    progress: str
    attempts: int
    due_at: str  # queued or waiting: when the next attempt is due
    holder: str | None  # sending: the server instance that claimed it
    claim_until: str | None
    last_status: int | None
    last_error: str | None
    settled_at: str | None


def wire(
    row: type[msgspec.Struct],
    name: str,
    module: str,
    *,
    keep: tuple[str, ...] | None = None,
    types: dict[str, Any] | None = None,
) -> type[msgspec.Struct]:
    """A body derived from ``row``: its fields up to the first one not on the wire (or only
    ``keep``), in the row's order, with ``types`` replacing a field's type where the wire
    names its own (for a schema document). ``out`` fills one from a row."""
    fields = msgspec.structs.fields(row)
    names = [f.name for f in fields]
    wanted = keep if keep is not None else tuple(names[: names.index(_FIRST_INTERNAL[row])])
    by_name = {f.name: f.type for f in fields}
    chosen = [(n, (types or {}).get(n, by_name[n])) for n in names if n in wanted]
    return msgspec.defstruct(name, chosen, kw_only=True, module=module)


def out(body: type[Any], row: msgspec.Struct) -> Any:
    """``row`` as the wire body ``body`` (made by ``wire``): the same values, fewer fields."""
    return body(**{name: getattr(row, name) for name in body.__struct_fields__})


# Where each row's wire part ends.
_FIRST_INTERNAL: dict[type[msgspec.Struct], str] = {
    LeaseRow: "updated_at",
    SessionRow: "requested",
    JobRow: "write_scope",
    TaskRow: "followups",
}


class DomainView(Protocol):
    def lease(self, name: str) -> LeaseRow | None: ...

    def session(self, session_id: str) -> SessionRow | None: ...

    def job(self, job_id: str) -> JobRow | None: ...

    def task(self, task_id: str) -> TaskRow | None: ...

    def job_of_command(self, command_id: str) -> JobRow | None:
        """The job a command (its idempotency key) accepted, if any."""
        ...

    def job_controlled_by(self, command_id: str) -> JobRow | None:
        """The job a command (its idempotency key) sent a control into, if any: an A2A
        follow-up or an invocation delivered into a running job."""
        ...

    def retired_job_of_command(self, command_id: str) -> str | None:
        """The retired job (ADR 0062) a command accepted or sent a control into, if any: its
        row is gone, its idempotency key is answered forever."""
        ...

    def control_state(self, job_id: str, control: int) -> str | None:
        """``pending``, ``delivered`` or ``lost``: what became of a job's control (None: no
        such control)."""
        ...

    def pending_requests(self, job_id: str) -> list[tuple[str, str]]:
        """A job's requests for input that wait for an answer, oldest first: (id, question)."""
        ...

    def live_jobs(self, session_id: str) -> list[JobRow]:
        """Non-terminal jobs of a session, oldest first."""
        ...

    def push_config(self, task_id: str, config_id: str) -> PushConfigRow | None: ...

    def delivery(self, delivery_id: str) -> DeliveryRow | None: ...

    def deliveries_claimed(self, holder: str, now: str) -> int:
        """How many deliveries ``holder`` has claimed and not settled, claims not run out."""
        ...

    def open_tasks(self, session_id: str) -> list[TaskRow]:
        """Non-terminal tasks of a session, oldest first."""
        ...

    def live_descendants(self, job_id: str) -> list[JobRow]:
        """Non-terminal jobs below ``job_id`` in the lineage, parents before children."""
        ...

    def units_held(self, resource_group: str) -> int:
        """Units held by sessions and jobs of a group in capacity-holding states."""
        ...

    def jobs_integrating(self) -> list[str]:
        """Ids of the jobs whose result is ``integrating`` (an intent recorded, neither
        confirmed nor undone): at most one, as the workspace is integrated one at a time."""
        ...

    def write_scopes_held(self) -> list[tuple[str, str]]:
        """``(job_id, path)`` of every write scope held by a capacity-holding job."""
        ...

    def jobs_holding(
        self,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        parent_job: str | None = None,
        writers: bool = False,
    ) -> int:
        """How many capacity-holding jobs match every given filter (``writers``: only those
        with a write scope)."""
        ...
