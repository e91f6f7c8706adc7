"""Integrating an accepted writer's patch into the workspace (ADR 0037): intent, write, confirm.

An applied patch is never left unrecorded, and a crash never leaves it half applied:

1. The kept patch must still hash to the sha256 on record. What applying it to the working
   tree as it is now gives is worked out aside, in a scratch index (``adapters.gitwork.apply``):
   the tree before and the tree after, and the paths that differ. A conflict is a 409 naming
   its paths; nothing was recorded and nothing on disk changed.
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

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from adapters.gitwork import apply
from adapters.gitwork.runner import GitFailed
from adapters.writers import PatchUnusable, Worktrees
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.domain.errors import Conflict, NotFound
from projections import queries

log = logging.getLogger("foldline.integration")
CUT_OFF = "cut off by a crash before it was confirmed: written back"


class Integrator:
    def __init__(self, engine: Callable[[], DomainEngine], worktrees: Worktrees) -> None:
        self._engine = engine
        self.worktrees = worktrees
        self._one = threading.Lock()  # one integration at a time in this process

    @property
    def scratch(self) -> Path:
        """The scratch index, one per lease epoch: a git killed with its server leaves a
        ``.lock`` beside the one it used, which would block every later command on it."""
        epoch = self._engine().log.epoch
        return self.worktrees.workspace / ".git" / f"foldline-integrate-{epoch}.index"

    def integrate(
        self, job_id: str, caller_job: str | None, caller_digest: str | None, sha256: str | None
    ) -> None:
        """Apply ``job_id``'s accepted patch to the workspace, recorded (see the module).

        Raises:
            NotFound: no such job.
            Conflict: no patch, a patch that no longer matches, ``sha256`` not the recorded
                one, or the patch conflicts with the working tree (``paths``).
            EngineError: the rules refused (caller, disposition, taint, another integration).
            GitFailed: git failed before anything was written.
        """
        engine = self._engine()
        job = queries.job(engine.log.connection(), job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} does not exist", job_id=job_id)
        if job.patch is None:
            raise Conflict(f"job {job_id} has no patch to integrate", job_id=job_id)
        if sha256 is not None and sha256 != job.patch.sha256:
            raise Conflict(
                f"sha256 {sha256} is not the patch of {job_id} ({job.patch.sha256})",
                job_id=job_id,
            )
        try:
            data = self.worktrees.read_patch(job_id, job.patch.sha256)
        except PatchUnusable as ex:
            raise Conflict(str(ex), job_id=job_id) from None
        with self._one:
            try:
                plan = apply.plan(self.worktrees.git, self.worktrees.workspace, data, self.scratch)
            except apply.Conflicts as ex:
                raise Conflict(
                    f"the patch of {job_id} conflicts with the workspace at"
                    f" {', '.join(ex.paths)}: nothing applied",
                    job_id=job_id,
                    reason="integration_conflict",
                    paths=list(ex.paths),
                ) from None
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
                self._write(plan.after_tree, plan.paths)
                engine.handle(c.ConfirmIntegration(job_id=job_id, tree=plan.after_tree))
            except BaseException as ex:
                # Confirmed after all (an error after the commit)? Then nothing is undone.
                now = queries.job(engine.log.connection(), job_id)
                if now is None or now.result_state != "integrated":
                    self._undo(engine, job_id, job.session_id, plan, f"not confirmed: {ex}")
                raise

    def _write(self, tree: str, paths: tuple[str, ...]) -> None:
        if paths:
            apply.write(self.worktrees.git, self.worktrees.workspace, tree, paths, self.scratch)

    def _undo(
        self, engine: DomainEngine, job_id: str, session_id: str, plan: apply.Plan, why: str
    ) -> None:
        """Write the paths back to the before tree and record it; if that fails, taint the
        session (the intent stays, for recovery to try again)."""
        try:
            self._write(plan.before_tree, plan.paths)
            engine.handle(c.UndoIntegration(job_id=job_id, reason=why[:1000]))
            log.warning("integration of %s undone: %s", job_id, why)
        except Exception as ex:
            reason = f"integration of {job_id} could not be undone ({why}): {ex}"[:1000]
            log.error("%s", reason)
            try:
                engine.handle(c.TaintSession(session_id=session_id, reason=reason))
            except Exception as taint_failed:
                log.critical(
                    "manual recovery needed: %s; the taint was not recorded either: %s",
                    reason,
                    taint_failed,
                )

    def recover(self) -> list[str]:
        """Finish what a crash cut off: an intent whose tree is written is confirmed, any other
        is written back and undone. The job ids seen."""
        engine = self._engine()
        seen = []
        for job in queries.integrations_in_flight(engine.log.connection()):
            intent = job.integration
            assert intent is not None
            plan = apply.Plan(intent.before, intent.after, intent.paths)
            seen.append(job.job_id)
            with self._one:
                try:
                    done = apply.matches(
                        self.worktrees.git,
                        self.worktrees.workspace,
                        plan.after_tree,
                        plan.paths,
                        self.scratch,
                    )
                except GitFailed as ex:
                    done = False
                    log.error("integration of %s: the tree could not be read: %s", job.job_id, ex)
                if done:
                    engine.handle(c.ConfirmIntegration(job_id=job.job_id, tree=plan.after_tree))
                    log.warning("integration of %s was written before the crash", job.job_id)
                else:
                    self._undo(engine, job.job_id, job.session_id, plan, CUT_OFF)
        return seen
