"""What a run is given to read besides its prompt (ADR 0049): its session's history and its
job's earlier output, as files named in its environment.

- ``FOLDLINE_SESSION_HISTORY`` (a run of a root job: an ``/invocations`` job, an A2A task's
  job, an operator's top-level ``/v1/jobs`` job): the session's earlier root jobs, oldest
  first, as JSON lines (``history``). A worker a job spawned gets none: its parent says what it
  needs in its prompt.
- ``FOLDLINE_EARLIER_OUTPUT`` (a resumed run: after a crash, a cold pause or a suspension): the
  text the job's earlier runs recorded (its ``job.output`` events), in order
  (``earlier_output``, ``give_earlier_output``). The job's result is that text followed by the
  last run's stdout (``adapters.services.run``).

Where the files are (``RunFiles``): a fresh 0700 directory in the server's temporary
directory, never the workspace (a run's ``git status`` stays clean) nor the log's directory
(runs may never read it), owned by the user the run executes as, and removed when the run
ends. A crash of the server leaves it to the system's cleaning of its temporary directory.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.services.sandbox import Sandbox
from adapters.settings.config import RunUser
from engine.domain.job import JobAccepted, JobOutput
from engine.domain.job import JobState as J
from engine.log import Log
from projections import queries

log = logging.getLogger("foldline.runner")

HISTORY_ENV = "FOLDLINE_SESSION_HISTORY"
EARLIER_OUTPUT_ENV = "FOLDLINE_EARLIER_OUTPUT"
HISTORY_FILE = "session-history.jsonl"
EARLIER_OUTPUT_FILE = "earlier-output.txt"
HISTORY_BYTES = 256 * 1024  # the whole history file, at most
HISTORY_JOBS = 1000  # entries read at most, however small
TEXT_CHARS = 32 * 1024  # of one prompt or reply: a single huge reply leaves room for others
REPLIED = frozenset({J.OK, J.ERROR})  # the states whose result is a reply


class RunFiles:
    """A run's own directory of files to read, made on the first ``path`` and removed by
    ``remove``. Outside the workspace and the log's directory (``private``); its owner is
    ``user`` (None: the server's own user)."""

    def __init__(
        self, user: RunUser | None, workspace: Path, private: Path, base: Path | None = None
    ) -> None:
        self._user, self._workspace, self._private = user, workspace, private
        self._base_dir = base  # a sandbox's given root (ADR 0064), else the temporary dir
        self._folder: Path | None = None

    @property
    def folder(self) -> Path | None:
        """The run's directory, once a file was named in it."""
        return self._folder

    def path(self, name: str) -> Path:
        """Where the file ``name`` goes (not written yet); the directory is made now.

        Raises:
            OSError: the directory could not be made or handed to the run's user.
        """
        if self._folder is None:
            folder = Path(tempfile.mkdtemp(prefix="foldline-run-", dir=self._base()))
            if self._user is not None:
                os.chown(folder, self._user.uid, self._user.gid)
            self._folder = folder
        return self._folder / name

    def write(self, name: str, data: bytes) -> Path:
        """Write ``name`` whole (never through a link: the directory is ours and fresh, and
        the file is created, not opened), readable by the run's user. Returns its path.

        Raises:
            OSError: it could not be written.
        """
        path = self.path(name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            if self._user is not None:
                os.fchown(fd, self._user.uid, self._user.gid)
            with os.fdopen(fd, "wb", closefd=False) as out:
                out.write(data)
        finally:
            os.close(fd)
        return path

    def remove(self) -> None:
        """The directory and what it holds go (the run has ended)."""
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _base(self) -> str:
        """The server's temporary directory, unless it lies in the workspace or the log's
        directory (a ``TMPDIR`` set there): then ``/tmp``."""
        if self._base_dir is not None:
            return str(self._base_dir)
        base = Path(tempfile.gettempdir()).resolve()
        inside = any(base.is_relative_to(p.resolve()) for p in (self._workspace, self._private))
        return "/tmp" if inside else str(base)


# -- the session's history ---------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One earlier root job of the session, as its history line says it."""

    job_id: str
    state: str
    agent: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    prompt: str
    prompt_file: str
    reply: str | None  # the final result of an ``ok`` or ``error`` job; None otherwise


def _cut(text: str) -> tuple[str, bool]:
    return (text[:TEXT_CHARS], True) if len(text) > TEXT_CHARS else (text, False)


def entry_line(entry: Entry) -> bytes:
    """One JSON line: ``kind`` ``job``, the job's fields, and ``cut`` when its prompt or reply
    was cut to its first ``TEXT_CHARS`` characters."""
    prompt, prompt_cut = _cut(entry.prompt)
    reply, reply_cut = _cut(entry.reply) if entry.reply is not None else (None, False)
    body: dict[str, Any] = {
        "kind": "job",
        "job_id": entry.job_id,
        "state": entry.state,
        "agent": entry.agent,
        "created_at": entry.created_at,
        "started_at": entry.started_at,
        "finished_at": entry.finished_at,
        "prompt": prompt,
        **({"prompt_file": entry.prompt_file} if entry.prompt_file else {}),
        "reply": reply,
    }
    if prompt_cut or reply_cut:
        body["cut"] = True
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"


def compose_history(newest_first: Iterable[Entry], more: bool, limit: int = HISTORY_BYTES) -> bytes:
    """The history file: one line per entry, oldest first, the newest kept within ``limit``
    bytes. When older entries were left out (for room, or because ``more`` says the read
    stopped short), the first line says how many were, as far as known:
    ``{"kind": "omitted", "jobs": N, "more": bool}``; the whole file stays within ``limit``."""
    kept: list[bytes] = []
    size, dropped, full = 0, 0, False
    for entry in newest_first:
        line = entry_line(entry)
        if full or size + len(line) > limit - 100:  # room for the omitted line
            full = True
            dropped += 1
            continue
        kept.append(line)
        size += len(line)
    head = b""
    if dropped or more:
        note = {"kind": "omitted", "jobs": dropped, "more": more}
        head = json.dumps(note).encode() + b"\n"
    return head + b"".join(reversed(kept))


def _entries(engine_log: Log, rows: list[queries.RootJob]) -> Iterator[Entry]:
    for row in rows:
        found = engine_log.read_all(after_position=row.accepted_position - 1, limit=1)
        accepted = found[0].event if found else None
        prompt = accepted.prompt if isinstance(accepted, JobAccepted) else ""
        yield Entry(
            job_id=row.job_id,
            state=row.state,
            agent=row.agent,
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            prompt=prompt,
            prompt_file=row.prompt_file,
            reply=(row.result or "") if row.state in REPLIED else None,
        )


def history(engine_log: Log, session_id: str, job_id: str) -> bytes:
    """The history file of a run of ``job_id``: the root jobs of ``session_id`` accepted
    before it (all of them while it is not recorded), oldest first, the newest kept."""
    conn = engine_log.connection()
    rows = queries.session_root_jobs(conn, session_id, job_id, HISTORY_JOBS + 1)
    more = len(rows) > HISTORY_JOBS
    return compose_history(_entries(engine_log, rows[:HISTORY_JOBS]), more)


def give_history(files: RunFiles, engine_log: Log, session_id: str, job_id: str) -> None:
    """Write the history file where the run's ``HISTORY_ENV`` names it; a failure is logged
    and the run finds no file there (its start is recorded already)."""
    try:
        files.write(HISTORY_FILE, history(engine_log, session_id, job_id))
    except OSError as ex:
        log.error("history of %s not written: %s", job_id, ex)


# -- the job's earlier output ------------------------------------------------------------------


def earlier_output(engine_log: Log, job_id: str) -> str:
    """What the job's runs recorded as output so far (its ``job.output`` events), in order."""
    return "".join(
        e.event.text
        for e in engine_log.read_stream(f"job:{job_id}")
        if isinstance(e.event, JobOutput)
    )


def give_earlier_output(
    files: RunFiles, engine_log: Log, job_id: str
) -> tuple[dict[str, str], str]:
    """The reusable piece for any launch that continues a job (a resume after a crash, a
    continue after a pause or a suspension): write its earlier output to ``files``. Returns
    the run's environment naming the file, and the text (the start of the job's result).

    Raises:
        OSError: the file could not be written (the launch fails: nothing is recorded).
    """
    text = earlier_output(engine_log, job_id)
    path = files.write(EARLIER_OUTPUT_FILE, text.encode())
    return {EARLIER_OUTPUT_ENV: str(path)}, text


def fork_seed(engine_log: Log, source_id: str, fork_id: str) -> str:
    """What fork ``fork_id`` starts from (ADR 0057): its source's output recorded before the
    fork's ``job.accepted``, the same on every run of the fork (a resume after a crash too)."""
    accepted = engine_log.read_stream(f"job:{fork_id}")[0].position
    return "".join(
        e.event.text
        for e in engine_log.read_stream(f"job:{source_id}")
        if isinstance(e.event, JobOutput) and e.position < accepted
    )


# -- one launch's runs -------------------------------------------------------------------------


@dataclass
class Given:
    """What one launch (``Dispatcher.launch_all``) gives its runs: each run's files, by run
    id, named in its environment before its spawn (``prepare``), the history written once its
    start is recorded (``settle``), all of them gone if the launch fails (``discard``)."""

    engine_log: Log
    sandbox: Sandbox | None  # the runs' user is the sandbox's (None: the server's own)
    workspace: Path
    private: Path
    _files: dict[str, RunFiles] = field(default_factory=dict)
    _history: dict[str, str] = field(default_factory=dict)  # run id -> its job's id
    # run id -> a fork's id, its source's and its own earlier output (ADR 0057)
    _forks: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def prepare(
        self,
        env: dict[str, str],
        job_id: str,
        run_id: str,
        history: bool,
        resumed: bool,
        forked_from: str | None = None,
    ) -> str:
        """Name the run's files in ``env``: the history's (a root job's), the earlier output's
        (a resumed run's, written now; a fork's, its source's output before its own, written
        once its start is recorded). Returns the earlier output ("" for a first run).

        Raises:
            OSError: the run's directory or its earlier output could not be written.
        """
        jail = self.sandbox
        user, base = (jail.user, jail.given_root) if jail is not None else (None, None)
        files = self._files[run_id] = RunFiles(user, self.workspace, self.private, base)
        if history:
            env[HISTORY_ENV] = str(files.path(HISTORY_FILE))
            self._history[run_id] = job_id
        earlier = ""
        if resumed and forked_from is None:
            told, earlier = give_earlier_output(files, self.engine_log, job_id)
            env.update(told)
        elif resumed:  # a fork's file is its source's output and then this: written in settle
            earlier = earlier_output(self.engine_log, job_id)
        if forked_from is not None:
            env[EARLIER_OUTPUT_ENV] = str(files.path(EARLIER_OUTPUT_FILE))
            self._forks[run_id] = (job_id, forked_from, earlier)
        return earlier

    def folder(self, run_id: str) -> Path | None:
        """The directory of the run's files, if ``prepare`` named any."""
        files = self._files.get(run_id)
        return files.folder if files is not None else None

    def settle(self, run_id: str, session_id: str) -> RunFiles:
        """The run's start is recorded: write its history (if it gets one), before its gate
        opens. Returns its files, for its thread to remove when it ends."""
        if run_id in self._history:
            give_history(self._files[run_id], self.engine_log, session_id, self._history[run_id])
        if run_id in self._forks:
            job_id, source_id, own = self._forks[run_id]
            seed = fork_seed(self.engine_log, source_id, job_id)
            try:
                self._files[run_id].write(EARLIER_OUTPUT_FILE, (seed + own).encode())
            except OSError as ex:
                log.error("the output %s forks from is not written: %s", job_id, ex)
        return self._files[run_id]

    def discard(self) -> None:
        """The launch failed, or started nothing: every run's files go."""
        for files in self._files.values():
            files.remove()
