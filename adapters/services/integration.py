"""Integrating an accepted writer's patch into the workspace (ADR 0037): intent, write, confirm.

An applied patch is never left unrecorded, and a crash never leaves it half applied:

1. The kept patch must still hash to the sha256 on record. What applying it to the working
   tree as it is now gives is worked out aside, in a scratch index
   (``adapters.system.gitwork.apply``): the tree before and the tree after, and the paths that
   differ. A conflict is a 409 naming its paths; nothing was recorded and nothing on disk changed.
2. ``result.integrating`` records the intent with both trees and the paths (the rules check
   the caller, the disposition, the taint, the sha256, and that no other integration is under
   way).
3. The paths are written to the after tree, as the run user.
4. ``result.integrated`` confirms it, with the after tree.

If step 3 or 4 fails, the paths are written back to the before tree and
``result.integration_undone`` puts the result back to ``accepted``; if even that fails, the
session is tainted (``session.tainted``, an event) and the intent stays for recovery. After a
``kill -9`` anywhere, recovery (``recover``) finds the intent: a tree that matches the after
tree is confirmed, anything else is written back to the before tree and undone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from adapters.services.writers import PatchUnusable, Worktrees
from adapters.system.gitwork import apply
from adapters.system.gitwork.runner import GitFailed
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.domain.errors import Conflict, NotFound
from engine.domain.job import JobState as J
from engine.domain.result import ResultState as R
from engine.domain.rows import JobRow
from projections import queries

log = logging.getLogger("foldline.integration")
CUT_OFF = "cut off by a crash before it was confirmed: written back"


class IntegrationFailed(Exception):
    """git could not plan or write the patch; ``status`` is the HTTP answer (409: the workspace
    cannot take it now; 500: the write failed, and was written back and undone)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class Integrator:
    def __init__(self, engine: Callable[[], DomainEngine], worktrees: Worktrees) -> None:
        self._engine = engine
        self.worktrees = worktrees

    @contextlib.contextmanager
    def _alone(self, wait: bool = True) -> Iterator[bool]:
        """The workspace's integrate lock (see the module); yields False when ``wait`` is off
        and another holds it."""
        self.worktrees.patches.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.worktrees.patches / "integrate.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # and with it the lock

    def scratch(self) -> Path:
        """The scratch index, one per lease epoch (a git killed with its server leaves a
        ``.lock`` beside the one it used, which would block every later command on it), in
        the repository's git directory wherever that is (``.git`` may be a file)."""
        name = f"foldline-integrate-{self._engine().log.epoch}.index"
        where = self.worktrees.git.run(["rev-parse", "--git-path", name], self.worktrees.workspace)
        path = Path(where.decode().strip())
        return path if path.is_absolute() else self.worktrees.workspace / path

    def integrate(
        self, job_id: str, caller_job: str | None, caller_digest: str | None, sha256: str | None
    ) -> None:
        """Apply ``job_id``'s accepted patch to the workspace, recorded (see the module).

        Raises:
            NotFound: no such job.
            Conflict: not an accepted ``ok`` result with a patch, a tainted session, another
                integration in flight, a patch that no longer matches, ``sha256`` not the
                recorded one, or the patch conflicts with the working tree (``paths``).
            EngineError: the rules refused (the caller, or any of the above meanwhile).
            IntegrationFailed: git could not plan or write it (nothing left applied).
        """
        engine = self._engine()
        job = self._integrable(engine, job_id, sha256)
        assert job.patch is not None
        try:
            data = self.worktrees.read_patch(job_id, job.patch.sha256)
        except PatchUnusable as ex:
            raise Conflict(str(ex), job_id=job_id) from None
        with self._alone():
            self._integrable(engine, job_id, sha256)  # again, now that it is ours alone
            try:
                scratch = self.scratch()
                plan = apply.plan(self.worktrees.git, self.worktrees.workspace, data, scratch)
            except apply.Conflicts as ex:
                raise Conflict(
                    f"the patch of {job_id} conflicts with the workspace at"
                    f" {', '.join(ex.paths)}: nothing applied",
                    job_id=job_id,
                    reason="integration_conflict",
                    paths=list(ex.paths),
                ) from None
            except GitFailed as ex:
                raise IntegrationFailed(
                    "409 Conflict", f"the workspace cannot take it: {ex}"
                ) from None
            outside = sorted(set(plan.paths) - set(job.patch.paths))
            if outside:  # the patch is the recorded one: this is git, or a tampered tree
                raise Conflict(
                    f"applying the patch of {job_id} would change {', '.join(outside)}, which"
                    " it does not name: nothing applied",
                    job_id=job_id,
                )
            engine.handle(
                c.BeginIntegration(
                    job_id=job_id,
                    caller_job=caller_job,
                    caller_token_digest=caller_digest,
                    sha256=job.patch.sha256,
                    before_tree=plan.before_tree,
                    after_tree=plan.after_tree,
                    paths=plan.paths,
                )
            )
            try:
                self._write(plan.after_tree, plan.paths, scratch)
                engine.handle(c.ConfirmIntegration(job_id=job_id, tree=plan.after_tree))
            except BaseException as ex:
                # Confirmed after all (an error after the commit)? Then nothing is undone.
                now = queries.job(engine.log.connection(), job_id)
                if now is None or now.result_state != R.INTEGRATED:
                    self._undo(engine, job, plan, scratch, f"not confirmed: {ex}")
                if isinstance(ex, GitFailed):
                    raise IntegrationFailed(
                        "500 Internal Server Error",
                        f"writing the patch failed, and it was written back: {ex}",
                    ) from None
                raise

    @staticmethod
    def _integrable(engine: DomainEngine, job_id: str, sha256: str | None) -> JobRow:
        """The job, if the rules would let its patch be integrated now as far as the read
        models tell (the caller is the rules' to judge): checked before git touches anything.
        """
        conn = engine.log.connection()
        job = queries.job(conn, job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} does not exist", job_id=job_id)
        session = queries.session(conn, job.session_id)
        why = (
            "it has no patch"
            if job.patch is None
            else f"it ended {job.state}"
            if job.state != J.OK
            else f"its result is {job.result_state}, not accepted"
            if job.result_state != R.ACCEPTED
            else "its session is tainted"
            if session is not None and session.tainted
            else None
        )
        if why is None:
            busy = [row.job_id for row in queries.integrations_in_flight(conn)]
            why = f"job {busy[0]} is being integrated" if busy else None
        if why is not None:
            raise Conflict(f"job {job_id} cannot be integrated: {why}", job_id=job_id)
        assert job.patch is not None
        if sha256 is not None and sha256 != job.patch.sha256:
            raise Conflict(
                f"sha256 {sha256} is not the patch of {job_id} ({job.patch.sha256})",
                job_id=job_id,
            )
        return job

    def _write(self, tree: str, paths: tuple[str, ...], scratch: Path) -> None:
        if paths:
            apply.write(self.worktrees.git, self.worktrees.workspace, tree, paths, scratch)

    def _undo(
        self, engine: DomainEngine, job: JobRow, plan: apply.Plan, scratch: Path | None, why: str
    ) -> None:
        """Write the paths back to the before tree and record it; if that fails, taint the
        session once (the intent stays, for recovery to try again)."""
        try:
            self._write(plan.before_tree, plan.paths, scratch or self.scratch())
            engine.handle(c.UndoIntegration(job_id=job.job_id, reason=why[:1000]))
            log.warning("integration of %s undone: %s", job.job_id, why)
        except Exception as ex:
            reason = f"integration of {job.job_id} could not be undone ({why}): {ex}"[:1000]
            log.error("%s", reason)
            session = queries.session(engine.log.connection(), job.session_id)
            if session is not None and session.tainted:
                return
            try:
                engine.handle(c.TaintSession(session_id=job.session_id, reason=reason))
            except Exception as taint_failed:
                log.critical(
                    "manual recovery needed: %s; the taint was not recorded either: %s",
                    reason,
                    taint_failed,
                )

    def recover(self, wait: bool = True) -> list[str]:
        """Finish what a crash cut off: an intent whose tree is written is confirmed, any other
        is written back and undone. The job ids seen (none when ``wait`` is off and another
        process integrates now: its intent is no crash's)."""
        engine = self._engine()
        if not queries.integrations_in_flight(engine.log.connection()):
            return []  # the common case: no git started
        seen = []
        with self._alone(wait) as alone:
            if not alone:
                return []
            for job in queries.integrations_in_flight(engine.log.connection()):
                intent = job.integration
                assert intent is not None
                plan = apply.Plan(intent.before, intent.after, intent.paths)
                seen.append(job.job_id)
                scratch = None
                try:
                    scratch = self.scratch()
                    done = apply.matches(
                        self.worktrees.git, self.worktrees.workspace, plan.after_tree,
                        plan.paths, scratch,
                    )  # fmt: skip
                except GitFailed as ex:
                    done = False
                    log.error("integration of %s: the tree could not be read: %s", job.job_id, ex)
                if done:
                    engine.handle(c.ConfirmIntegration(job_id=job.job_id, tree=plan.after_tree))
                    log.warning("integration of %s was written before the crash", job.job_id)
                else:
                    self._undo(engine, job, plan, scratch, CUT_OFF)
        return seen
