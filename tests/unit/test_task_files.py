"""A completed task keeps its job's ``MEDIA:`` files: on the event and in the tasks read model,
on both backends; a task completed without files (or by an older event) has none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from engine.domain import commands as c
from engine.domain import ids
from engine.domain.job import FileEntry
from engine.domain.task import TaskCompleted
from engine.engine import Engine
from projections import open_engine, queries
from tests.support.backends import log_target
from tests.unit.test_rules import session

FILES = (
    FileEntry(path="./out.png", size=3, workspace_path="out.png"),
    FileEntry(path="deep/it's.bin", size=70_000, workspace_path="deep/it's.bin"),
)


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    opened = open_engine(log_target(request.param, tmp_path))
    yield opened
    opened.log.close()


def _finish(engine: Engine, task_id: str, jid: str, files: tuple[FileEntry, ...]) -> None:
    engine.handle(c.CreateTask(task_id=task_id, session_id="s1", message_id=f"m-{jid}"))
    engine.handle(c.AcceptJob(job_id=jid, session_id="s1", owed=False, task_id=task_id))
    engine.handle(c.StartJob(job_id=jid, run_id=f"run-{jid}"))
    engine.handle(c.FinishJob(job_id=jid, outcome="ok", result="done", files=files))


def test_task_files_of_the_job_are_on_the_event_and_the_row(engine: Engine) -> None:
    session(engine)
    _finish(engine, "t1", "j1", FILES)
    _finish(engine, "t2", "j2", ())
    [completed] = [
        e.event
        for e in engine.log.read_stream(ids.task("t1"))
        if isinstance(e.event, TaskCompleted)
    ]
    assert completed.files == FILES
    one = queries.task(engine.log.connection(), "t1")
    assert one is not None and (one.state, one.result, one.files) == ("completed", "done", FILES)
    two = queries.task(engine.log.connection(), "t2")
    assert two is not None and two.files == ()


def test_task_completed_recorded_before_files_existed_decodes_with_none() -> None:
    old = msgspec.json.encode({"result": "r", "warnings": ["w"]})
    assert msgspec.json.decode(old, type=TaskCompleted).files == ()
