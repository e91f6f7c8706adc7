"""What a run answers (ADR 0054) on a real log file: answer lines parsed from a run's stdout
within their limits (a run without them keeps its result as it was), and the domain's record of
each answer on the job's and the task's streams: artifact chunks folded, a message and a
refusal ending the task without cancelling the job, a request for authorization surviving the
run's ok end."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.services.run_channel import ANSWER_LIMIT, Signals, answers
from engine.domain import answer
from engine.domain import channel as ch
from engine.domain import commands as c
from engine.domain.engine import DomainEngine
from engine.errors import InvalidArgument
from projections import open_engine, queries
from tests.unit.test_rules import refused


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[DomainEngine]:
    made = open_engine(tmp_path / "log.db")
    made.handle(c.CreateSession(session_id="s1", start_run_id="r1"))
    made.handle(c.CreateTask(task_id="t1", session_id="s1"))
    made.handle(c.AcceptJob(job_id="j1", session_id="s1", owed=False, task_id="t1"))
    made.handle(c.StartJob(job_id="j1", run_id="run1"))
    yield made
    made.log.close()


def line(kind: str, **fields: Any) -> str:
    return "FOLDLINE: " + json.dumps({"type": kind, **fields}) + "\n"


def said(engine: DomainEngine, signal: str, **kw: Any) -> None:
    engine.handle(ch.RecordRunSignal(job_id="j1", run_id="run1", signal=signal, **kw))  # type: ignore[arg-type]


def task(engine: DomainEngine) -> Any:
    return queries.task(engine.log.connection(), "t1")


def test_run_answers_a_result_without_answer_lines_is_kept_as_it_was() -> None:
    text = 'a\nFOLDLINE: {"type": "progress", "text": "x"}\nFOLDLINE: nope\nno newline'
    assert answers(text, "j1", "run1") == ([], text)


def test_run_answers_lines_become_commands_and_leave_the_result() -> None:
    data = line("artifact", artifactId="a", parts=[{"data": {"n": 1}}])
    url = {"url": "https://example.com/x.pdf", "filename": "x.pdf", "mediaType": "application/pdf"}
    text = f"before\n{data}{line('message', parts=[url])}{line('reject')}after\n"
    commands, result = answers(text, "j1", "run1")
    assert result == "before\nafter\n"
    assert [cmd.signal for cmd in commands] == ["artifact", "message", "reject"]  # type: ignore[attr-defined]
    assert commands[0].parts == (answer.Part(data={"n": 1}),)  # type: ignore[attr-defined]
    assert commands[1].parts[0].media_type == "application/pdf"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "bad",
    [
        line("artifact", parts=[{"text": "no id"}]),
        line("artifact", artifactId="a", parts=[]),
        line("artifact", artifactId="a", parts=[{"text": "x", "data": {}}]),
        line("artifact", artifactId="a", parts=[{"unknown": 1}]),
        line("artifact", artifactId="a", parts=[{"url": "file:///etc/passwd"}]),
        line("artifact", artifactId="a", parts=[{"raw": "not base64!"}]),
        line("artifact", artifactId="a", parts=[{"text": "x", "filename": "x.txt"}]),
        line(
            "message",
            parts=[
                {"data": {"deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}
            ],
        ),
        line("message", parts="text"),
    ],
)
def test_run_answers_a_malformed_answer_stays_output(bad: str) -> None:
    assert answers(bad, "j1", "run1") == ([], bad)


def test_run_answers_a_file_past_the_limit_is_described_not_sent() -> None:
    raw = base64.b64encode(b"x" * (answer.RAW_LIMIT + 1)).decode()
    big = line("artifact", artifactId="a", parts=[{"raw": raw, "filename": "big.bin"}])
    assert len(big) < ANSWER_LIMIT
    (command,), _ = answers(big, "j1", "run1")
    (part,) = command.parts  # type: ignore[attr-defined]
    assert part.raw is None and part.data["omitted"] == "too_large"
    assert part.data["size"] == answer.RAW_LIMIT + 1 and part.data["filename"] == "big.bin"


def test_run_answers_a_channel_run_says_them_as_signals() -> None:
    chunk = line("artifact", artifactId="a", parts=[{"text": "He"}], append=False)
    said_ = Signals("j1", "run1").take(f"x\n{chunk}{line('auth_required')}", final=True)
    assert said_[0] == "x\n"
    assert [s.signal for s in said_[1:]] == ["artifact", "auth_required"]  # type: ignore[union-attr]
    assert said_[2].request == "auth"  # type: ignore[union-attr]


def test_run_answers_artifact_chunks_fold_into_the_task(engine: DomainEngine) -> None:
    said(engine, "artifact", artifact_id="a", name="story", parts=(answer.Part(text="He"),))
    said(engine, "artifact", artifact_id="b", parts=(answer.Part(data={"n": 1}),))
    said(engine, "artifact", artifact_id="a", parts=(answer.Part(text="llo"),), append=True)
    row = task(engine)
    assert row.state == "working"
    folded = [(a.artifact_id, a.name, [p.text or p.data for p in a.parts]) for a in row.artifacts]
    assert folded == [("a", "story", ["He", "llo"]), ("b", "", [{"n": 1}])]
    said(engine, "artifact", artifact_id="a", parts=(answer.Part(text="new"),))  # replaces
    assert [p.text for p in task(engine).artifacts[0].parts] == ["new"]


def test_run_answers_a_message_ends_the_task_and_leaves_the_job_to_its_run(
    engine: DomainEngine,
) -> None:
    said(engine, "message", parts=(answer.Part(text="hi"), answer.Part(data={"ok": True})))
    row = task(engine)
    assert (row.state, row.result) == ("completed", "hi")
    assert row.reply == (answer.Part(text="hi"), answer.Part(data={"ok": True}))
    assert queries.job(engine.log.connection(), "j1").state == "running"
    engine.handle(c.FinishJob(job_id="j1", outcome="ok", result="printed"))
    assert task(engine).result == "hi"  # the finish found the task ended


def test_run_answers_a_refusal_rejects_the_task_with_its_reason(engine: DomainEngine) -> None:
    said(engine, "reject", text="not mine")
    assert (task(engine).state, task(engine).status_text) == ("rejected", "not mine")
    engine.handle(c.FinishJob(job_id="j1", outcome="ok", result=""))
    assert queries.job(engine.log.connection(), "j1").state == "ok"


def test_run_answers_auth_required_outlives_an_ok_end_not_an_error(
    engine: DomainEngine, tmp_path: Path
) -> None:
    said(engine, "auth_required", request="auth", question="sign in")
    assert (task(engine).state, task(engine).status_text) == ("auth-required", "sign in")
    engine.handle(c.FinishJob(job_id="j1", outcome="ok", result=""))
    assert task(engine).state == "auth-required"  # the next message starts another run
    engine.handle(c.AcceptJob(job_id="j2", session_id="s1", owed=False, task_id="t1"))
    engine.handle(c.StartJob(job_id="j2", run_id="run2"))
    assert task(engine).state == "working"
    engine.handle(c.FinishJob(job_id="j2", outcome="error", result="boom"))
    assert task(engine).state == "failed"


def test_run_answers_refused_past_their_limits(engine: DomainEngine) -> None:
    big = answer.Part(data={"x": "y" * answer.DATA_LIMIT})
    cmd = ch.RecordRunSignal(job_id="j1", run_id="run1", signal="message", parts=(big,))
    assert "at most" in str(refused(engine, cmd, InvalidArgument))
    cmd = ch.RecordRunSignal(job_id="j1", run_id="run1", signal="artifact", parts=())
    assert "artifactId" in str(refused(engine, cmd, InvalidArgument))


def test_run_answers_a_chunk_past_its_limit_stays_output() -> None:
    raw = base64.b64encode(b"x" * 300_000).decode()  # each fits, the two together do not
    part = {"raw": raw, "filename": "a.bin"}
    big = line("artifact", artifactId="a", parts=[part, part])
    assert answers(big, "j1", "run1") == ([], big)


def test_run_answers_the_largest_file_by_its_bytes_fits_the_log(engine: DomainEngine) -> None:
    raw = base64.b64encode(b"x" * answer.RAW_LIMIT).decode()
    (command,), _ = answers(line("message", parts=[{"raw": raw}]), "j1", "run1")
    engine.handle(command)
    reply = task(engine).reply
    assert reply is not None and base64.b64decode(reply[0].raw) == b"x" * answer.RAW_LIMIT
