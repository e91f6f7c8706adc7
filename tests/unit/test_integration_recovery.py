"""The integrate protocol's compensations (adapters.services.integration, issue 28) on a real log
file and a real git repository: an intent whose files were all written is confirmed by recovery, a
half written one is written back and undone, a confirmation that fails is undone at once, and a
write-back that fails too taints the session by an event."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from adapters.services.integration import IntegrationFailed, Integrator
from adapters.services.writers import Worktrees, WriterRun
from adapters.system.gitwork import apply
from adapters.system.gitwork.runner import Git
from engine.domain import commands as c
from engine.engine import Engine
from engine.errors import StorageError
from projections import queries
from tests.unit.test_gitwork_worktrees import git_cli, make_repo
from tests.unit.test_rules import session

FILES = {f"src/f{n}.txt": f"old {n}\n".encode() for n in range(6)}


class Refusing:
    """The engine, but a command of ``kind`` fails as a lost disk would (nothing recorded)."""

    def __init__(self, engine: Engine, kind: type[c.Command]) -> None:
        self.engine, self.kind = engine, kind

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def handle(self, command: c.Command) -> Any:
        if isinstance(command, self.kind):
            raise StorageError("the disk went away")
        return self.engine.handle(command)


def _accepted_writer(engine: Engine, tmp_path: Path) -> tuple[Worktrees, str]:
    """A writer's job that changed every file, finished with its patch kept, and accepted."""
    workspace = make_repo(tmp_path / "ws", FILES)
    trees = Worktrees(workspace, tmp_path / "worktrees", tmp_path / "patches", Git(timeout_s=30))
    where, base = trees.make("j1")
    for name in FILES:
        (where / name).write_text((where / name).read_text().replace("old", "new"))
    session(engine)
    engine.handle(c.AcceptJob(job_id="j1", session_id="s1", write_scope=("src",), owed=False))
    engine.handle(c.StartJob(job_id="j1", run_id="r1", worktree=str(where), base_commit=base))
    outcome, _, patch = WriterRun("j1", where, base, ("src",), trees).judge("ok", "done")
    assert outcome == "ok" and patch is not None and len(patch.paths) == len(FILES)
    engine.handle(c.FinishJob(job_id="j1", run_id="r1", outcome="ok", patch=patch))
    engine.handle(c.ReadJobResult(job_id="j1"))
    engine.handle(c.AcceptJobResult(job_id="j1", reason="good"))
    return trees, patch.sha256


def _intent(engine: Engine, trees: Worktrees, sha256: str, integrator: Integrator) -> apply.Plan:
    """What an integrate records before it writes: the plan and its ``result.integrating``."""
    data = trees.read_patch("j1", sha256)
    plan = apply.plan(trees.git, trees.workspace, data, integrator.scratch())
    engine.handle(
        c.BeginIntegration(
            job_id="j1",
            sha256=sha256,
            before_tree=plan.before_tree,
            after_tree=plan.after_tree,
            paths=plan.paths,
        )
    )
    return plan


def _texts(trees: Worktrees) -> set[str]:
    return {(trees.workspace / name).read_text().split()[0] for name in FILES}


def _result(engine: Engine) -> str | None:
    row = queries.job(engine.log.connection(), "j1")
    assert row is not None
    return row.result_state


def _kinds(engine: Engine) -> list[str]:
    return [e.event_type for e in engine.log.read_stream("result:j1")]


def test_recovery_confirms_an_intent_whose_files_were_all_written(
    engine: Engine, tmp_path: Path
) -> None:
    trees, sha256 = _accepted_writer(engine, tmp_path)
    integrator = Integrator(lambda: engine, trees)  # type: ignore[arg-type, return-value]
    plan = _intent(engine, trees, sha256, integrator)
    apply.write(trees.git, trees.workspace, plan.after_tree, plan.paths, integrator.scratch())
    # The crash: nothing confirmed it. Recovery finds the intent.
    assert integrator.recover() == ["j1"]
    assert _result(engine) == "integrated" and _texts(trees) == {"new"}
    assert _kinds(engine)[-2:] == ["result.integrating", "result.integrated"]


def test_recovery_writes_back_and_undoes_a_half_written_intent(
    engine: Engine, tmp_path: Path
) -> None:
    trees, sha256 = _accepted_writer(engine, tmp_path)
    integrator = Integrator(lambda: engine, trees)  # type: ignore[arg-type, return-value]
    plan = _intent(engine, trees, sha256, integrator)
    half = plan.paths[: len(plan.paths) // 2]
    apply.write(trees.git, trees.workspace, plan.after_tree, half, integrator.scratch())
    assert _texts(trees) == {"old", "new"}  # in between, as a kill mid-write leaves it
    assert integrator.recover() == ["j1"]
    assert _result(engine) == "accepted" and _texts(trees) == {"old"}
    assert _kinds(engine)[-1] == "result.integration_undone"
    integrator.integrate("j1", None, None, None)  # and it can be integrated again
    assert _result(engine) == "integrated" and _texts(trees) == {"new"}


def test_a_confirmation_that_fails_is_written_back_and_undone_at_once(
    engine: Engine, tmp_path: Path
) -> None:
    trees, _ = _accepted_writer(engine, tmp_path)
    refusing = Refusing(engine, c.ConfirmIntegration)
    integrator = Integrator(lambda: refusing, trees)  # type: ignore[arg-type, return-value]
    with pytest.raises(StorageError):
        integrator.integrate("j1", None, None, None)
    assert _result(engine) == "accepted" and _texts(trees) == {"old"}
    assert _kinds(engine)[-2:] == ["result.integrating", "result.integration_undone"]


def test_a_write_back_that_fails_too_taints_the_session_and_leaves_the_intent(
    engine: Engine, tmp_path: Path
) -> None:
    trees, _ = _accepted_writer(engine, tmp_path)
    # An edit of the root's own, not committed: the tree before is then no commit's, and
    # nothing keeps its object from a prune.
    (trees.workspace / "notes.txt").write_text("the root's own edit\n")
    refusing = Refusing(engine, c.ConfirmIntegration)
    integrator = Integrator(lambda: refusing, trees)  # type: ignore[arg-type, return-value]
    real_write = apply.write
    calls: list[str] = []

    def write_then_lose_the_objects(*args: Any) -> None:
        calls.append(args[2])
        if len(calls) == 2:  # the write-back: the before tree was pruned meanwhile
            git_cli(trees.workspace, "prune", "--expire=now")
        real_write(*args)

    apply.write = write_then_lose_the_objects  # type: ignore[assignment]
    try:
        with pytest.raises(StorageError):
            integrator.integrate("j1", None, None, None)
    finally:
        apply.write = real_write  # type: ignore[assignment]
    assert len(calls) == 2
    assert _result(engine) == "integrating"  # the intent stays for recovery
    tainted = queries.session(engine.log.connection(), "s1")
    assert tainted is not None and tainted.tainted
    reasons = [
        e.event.reason
        for e in engine.log.read_stream("session:s1")  # type: ignore[attr-defined]
        if e.event_type == "session.tainted"
    ]
    assert len(reasons) == 1 and "could not be undone" in reasons[0]


def test_recovery_leaves_an_intent_alone_while_another_process_integrates(
    engine: Engine, tmp_path: Path
) -> None:
    trees, sha256 = _accepted_writer(engine, tmp_path)
    integrator = Integrator(lambda: engine, trees)  # type: ignore[arg-type, return-value]
    _intent(engine, trees, sha256, integrator)
    # Another process's integrate holds the workspace's lock: its intent is no crash's.
    held = os.open(trees.patches / "integrate.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        assert integrator.recover(wait=False) == []  # a lease renewal passes by
        assert _result(engine) == "integrating"
    finally:
        os.close(held)
    assert integrator.recover(wait=False) == ["j1"]  # that process died: the intent is undone
    assert _result(engine) == "accepted" and _texts(trees) == {"old"}


def test_a_workspace_git_cannot_read_is_a_409_and_records_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    trees, _ = _accepted_writer(engine, tmp_path)
    integrator = Integrator(lambda: engine, trees)  # type: ignore[arg-type, return-value]
    shutil.rmtree(trees.workspace / ".git")
    with pytest.raises(IntegrationFailed) as failed:
        integrator.integrate("j1", None, None, None)
    assert failed.value.status.startswith("409") and "cannot take it" in str(failed.value)
    assert _result(engine) == "accepted" and _kinds(engine)[-1] == "result.accepted"
