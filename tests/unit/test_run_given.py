"""What a run is given (ADR 0049): the history file's bound and shape, the run's own files."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from adapters.services.run_given import (
    HISTORY_BYTES,
    TEXT_CHARS,
    Entry,
    RunFiles,
    compose_history,
)


def _entry(n: int, reply: str | None = "fine", state: str = "ok") -> Entry:
    return Entry(
        job_id=f"job_{n:04d}",
        state=state,
        agent="",
        created_at="2026-01-01T00:00:00Z",
        started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:00:01Z",
        prompt=f"prompt {n} " + "x" * 1000,
        prompt_file="",
        reply=reply,
    )


def test_history_keeps_the_newest_within_its_bound_and_says_how_many_it_left_out() -> None:
    newest_first = [_entry(n) for n in range(999, -1, -1)]
    text = compose_history(newest_first, more=False)
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(text) <= HISTORY_BYTES
    head, kept = lines[0], lines[1:]
    assert head == {"kind": "omitted", "jobs": 1000 - len(kept), "more": False}
    assert 200 < len(kept) < 260  # ~1 KiB each in 256 KiB
    assert [e["job_id"] for e in kept] == [f"job_{n:04d}" for n in range(1000 - len(kept), 1000)]


def test_history_whole_has_no_omitted_line_and_a_read_cut_short_says_more() -> None:
    whole = compose_history([_entry(2), _entry(1)], more=False).splitlines()
    assert [json.loads(line)["job_id"] for line in whole] == ["job_0001", "job_0002"]
    short = compose_history([_entry(2)], more=True).splitlines()
    assert json.loads(short[0]) == {"kind": "omitted", "jobs": 0, "more": True}


def test_history_cuts_a_huge_reply_and_says_so_and_a_superseded_job_has_none() -> None:
    lines = compose_history(
        [_entry(2, reply="y" * (TEXT_CHARS * 8)), _entry(1, None, "superseded")], more=False
    ).splitlines()
    superseded, huge = (json.loads(line) for line in lines)
    assert (superseded["state"], superseded["reply"], "cut" in superseded) == (
        "superseded",
        None,
        False,
    )
    assert len(huge["reply"]) == TEXT_CHARS and huge["cut"] is True


def test_run_files_are_private_outside_the_workspace_and_gone_on_remove(tmp_path: Path) -> None:
    workspace, private = tmp_path / "ws", tmp_path / "ws" / ".foldline"
    private.mkdir(parents=True)
    files = RunFiles(None, workspace, private)
    path = files.write("history.jsonl", b"{}\n")
    assert path.read_bytes() == b"{}\n" and not path.is_relative_to(workspace)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    files.remove()
    assert not path.parent.exists()
    files.remove()  # twice is harmless
