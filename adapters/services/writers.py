"""Writers' worktrees (ADR 0037): where a ``workspace-write`` job runs, its patch when it ends,
and the sweep that leaves no worktree foldline forgot.

A writer gets a git worktree of its own on a branch ``foldline/<job>`` at the commit the
workspace is at, under the run user's home (``<home>/worktrees/<job>``: outside the workspace,
so the root's ``git clean`` or ``git status`` never meet it, and reachable by the run in every
isolation). Every git command runs as the run user, hooks off (``adapters.system.gitwork``): the
repository is the agent's, and nothing in it may run as the server.

When the run ends ``ok`` or ``error``, its change against the base commit (committed or not,
new files included) is taken as a binary patch, kept beside the log (``patches/<job>.patch``,
out of every run's reach) and recorded on ``job.finished`` with its sha256, size, changed
paths and base. A path changed outside the job's ``write_scope`` makes the result ``error``,
naming the paths. Once the job is over, its worktree and branch are removed; a job cut off by
a crash keeps them for its resumed run.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from adapters.services.sandbox import Sandbox
from adapters.settings.config import ServerConfig
from adapters.system.gitwork import patches, worktrees
from adapters.system.gitwork.runner import Git, GitFailed, NotARepository
from engine.domain.job import PatchEntry
from engine.storage.durable import fsync_dir

log = logging.getLogger("foldline.writers")


class PatchUnusable(Exception):
    """The kept patch is missing or no longer the one recorded: it is not applied."""


@dataclass(frozen=True)
class Worktrees:
    """The writers' worktrees of one workspace, and the patches they left."""

    workspace: Path
    root: Path  # the worktrees, one per job
    patches: Path  # the kept patches, beside the log
    git: Git

    @classmethod
    def for_server(cls, config: ServerConfig, sandbox: Sandbox | None, private: Path) -> Worktrees:
        """As the run user (the sandbox's chain) where runs have one, else as the server."""
        if sandbox is None:
            git = Git(env={"HOME": str(config.state_dir)})
            root = config.state_dir / "worktrees"
        else:
            git = Git(wrap=sandbox.wrap, env=sandbox.env())
            root = sandbox.home / "worktrees"
        return cls(config.workspace, root, private / "patches", git)

    def where(self, job_id: str) -> Path:
        return self.root / job_id

    def make(self, job_id: str) -> tuple[Path, str]:
        """A new worktree for ``job_id`` at the workspace's HEAD: its path and base commit.

        Raises:
            NotARepository: the workspace is no git repository with a commit.
            GitFailed: git could not make it.
        """
        base = worktrees.head_commit(self.git, self.workspace)
        where = self.where(job_id)
        worktrees.add(self.git, self.workspace, where, job_id, base)
        return where, base

    def writer(
        self,
        job_id: str,
        scopes: tuple[str, ...],
        kept: tuple[Path, str] | None,
        made: list[str],
        fork_of: tuple[Path, str] | None = None,
    ) -> WriterRun | None:
        """Where a launch of ``job_id`` writes: the worktree it ``kept`` (a resumed writer) or a
        new one (a fork's, ``fork_of`` its source's worktree and base: ``fork``), whose job id
        is added to ``made`` (the launch removes them if it fails). None
        for a reader (no ``scopes``), and for a writer in a workspace that is no git repository:
        the rules refuse its start (``writable_target_not_git``).

        Raises:
            GitFailed: git could not make the worktree.
        """
        if not scopes:
            return None
        if kept is None and fork_of is not None:  # a fork's first run (ADR 0057)
            return self.fork(job_id, scopes, fork_of, made)
        if kept is not None:
            where, base = kept
        else:
            try:
                where, base = self.make(job_id)
            except NotARepository as ex:
                log.warning("writer %s gets no worktree: %s", job_id, ex)
                return None
            made.append(job_id)
        return WriterRun(job_id, where, base, scopes, self)

    def fork(
        self, job_id: str, scopes: tuple[str, ...], source: tuple[Path, str], made: list[str]
    ) -> WriterRun:
        """A fork's worktree (ADR 0057): made at the source's base commit, with the source
        worktree's current change (committed or not) applied, so the fork starts where its
        source is; its job id is added to ``made``.

        Raises:
            GitFailed: git could not make the worktree, read the source's change or apply it.
        """
        source_tree, base = source
        where = self.where(job_id)
        worktrees.add(self.git, self.workspace, where, job_id, base)
        made.append(job_id)
        change = patches.capture(self.git, source_tree, base)
        if change.data:
            self.git.run(
                ["apply", "--binary", "--whitespace=nowarn", "-"], where, input=change.data
            )
        return WriterRun(job_id, where, base, scopes, self)

    def drop(self, job_id: str) -> None:
        """Remove the job's worktree and branch, if any; a failure is logged (the sweep at the
        next recovery tries again)."""
        try:
            worktrees.remove(self.git, self.workspace, self.where(job_id), job_id)
        except GitFailed as ex:
            log.error("worktree of %s not removed: %s", job_id, ex)

    def sweep(self, keep: Callable[[str], bool]) -> list[str]:
        """Remove every foldline worktree and branch whose job ``keep`` does not want (ended,
        or unknown to the log); the job ids removed."""
        if not (self.workspace / ".git").exists():  # no repository: no git to start for it
            return []
        try:
            listed = worktrees.listed(self.git, self.workspace)
            branches = self.git.run(
                [
                    "for-each-ref",
                    "--format=%(refname:short)",
                    "refs/heads/" + worktrees.BRANCH_PREFIX,
                ],
                self.workspace,
            )
        except GitFailed as ex:  # a broken repository: nothing it lists can be swept
            log.debug("no worktrees swept: %s", ex)
            return []
        jobs = {
            branch.removeprefix(worktrees.BRANCH_PREFIX)
            for _, branch in listed
            if branch and branch.startswith(worktrees.BRANCH_PREFIX)
        }
        jobs |= {
            name.removeprefix(worktrees.BRANCH_PREFIX)
            for name in branches.decode().split()
            if name.startswith(worktrees.BRANCH_PREFIX)
        }
        swept = sorted(job_id for job_id in jobs if not keep(job_id))
        for job_id in swept:
            self.drop(job_id)
        if swept:
            log.warning("removed %d worktree(s) of ended jobs: %s", len(swept), ", ".join(swept))
        return swept

    # -- patches ------------------------------------------------------------------------
    def patch_path(self, job_id: str) -> Path:
        return self.patches / f"{job_id}.patch"

    def keep(self, job_id: str, data: bytes) -> None:
        """Write the patch beside the log, whole or not at all (a crash leaves no half file
        under the name)."""
        self.patches.mkdir(mode=0o700, exist_ok=True)
        target = self.patch_path(job_id)
        partial = target.with_suffix(".partial")
        with open(partial, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(partial, 0o600)
        os.replace(partial, target)
        fsync_dir(self.patches)  # the kept patch's name survives a power cut (ADR 0055)

    def read_patch(self, job_id: str, sha256: str) -> bytes:
        """The kept patch, if it still is the one recorded.

        Raises:
            PatchUnusable: it is gone, or its bytes no longer hash to ``sha256``.
        """
        try:
            data = self.patch_path(job_id).read_bytes()
        except OSError as ex:
            raise PatchUnusable(f"the patch of {job_id} is gone: {ex.strerror}") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise PatchUnusable(f"the patch of {job_id} no longer matches its recorded sha256")
        return data


@dataclass(frozen=True)
class WriterRun:
    """One run of a writer: where it works and what it may change."""

    job_id: str
    worktree: Path
    base: str
    scopes: tuple[str, ...]
    worktrees: Worktrees

    def judge(self, outcome: str, result: str) -> tuple[str, str, PatchEntry | None]:
        """The run's outcome and result with its patch taken and kept: ``error`` (and the
        result saying why) when it changed paths outside its scope or the patch could not be
        taken."""
        try:
            patch = patches.capture(self.worktrees.git, self.worktree, self.base)
            self.worktrees.keep(self.job_id, patch.data)
        except (GitFailed, OSError) as ex:
            note = f"[foldline: the change could not be taken as a patch: {ex}]"
            return "error", f"{result}\n{note}".lstrip(), None
        entry = PatchEntry(
            sha256=patch.sha256, size=patch.size, paths=patch.paths, base_commit=self.base
        )
        outside = patches.outside(patch.paths, self.scopes)
        if outside:
            note = f"[foldline: changed outside write_scope: {', '.join(outside)}]"
            return "error", f"{result}\n{note}".lstrip(), entry
        return outcome, result, entry

    def release(self) -> None:
        self.worktrees.drop(self.job_id)
