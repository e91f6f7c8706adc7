"""One thread watches a run's stdout, stderr and exit (adapters.system.run_io, ADR 0027)."""

from __future__ import annotations

import select
import subprocess
from pathlib import Path

from adapters.services.run import _open_gate
from adapters.system.processes import kill_group, spawn_gated
from adapters.system.run_io import RunIO


def _run(command: str, prompt: bytes, tmp_path: Path) -> tuple[RunIO, int]:
    process = spawn_gated(command, tmp_path, {})
    io = RunIO(process.process)
    io.start()
    feeder = _open_gate(process, prompt)
    assert io.ended.wait(30), "the exit was never noted"
    code = process.process.wait(timeout=30)
    kill_group(process.pid)
    io.join(timeout=30)
    if feeder is not None:
        feeder.join(timeout=30)
    assert not io.is_alive()
    _close(process.process)
    return io, code


def _close(child: subprocess.Popen[bytes]) -> None:
    for stream in (child.stdout, child.stderr):
        assert stream is not None
        stream.close()


def test_run_io_reads_stdout_and_stderr_to_the_end(tmp_path: Path) -> None:
    io, code = _run("cat; echo oops >&2; exit 3", b"hello", tmp_path)
    assert (code, io.stdout(), io.stderr()) == (3, b"hello", b"oops\n")
    assert io.take_new() == b"hello" and io.take_new() == b""


def test_run_io_feeds_a_prompt_longer_than_a_pipe_holds(tmp_path: Path) -> None:
    prompt = bytes(range(256)) * 1024  # 256 KiB: the child writes while it is still fed
    assert len(prompt) > 4 * select.PIPE_BUF
    io, code = _run("cat", prompt, tmp_path)
    assert code == 0 and io.stdout() == prompt


def test_run_io_notes_the_exit_while_a_grandchild_holds_the_pipes(tmp_path: Path) -> None:
    # The grandchild keeps stdout open for a minute after the shell exits: the exit must be
    # noted from the process itself, not from the pipes' end.
    process = spawn_gated("(sleep 60 &) ; echo done", tmp_path, {})
    io = RunIO(process.process)
    io.start()
    _open_gate(process, b"")
    try:
        assert io.ended.wait(30), "the exit waited for the pipes"
        assert process.process.wait(timeout=30) == 0
        assert io.is_alive()  # still draining: the grandchild holds stdout
    finally:
        kill_group(process.pid)
    io.join(timeout=30)
    assert not io.is_alive() and io.stdout() == b"done\n"
    _close(process.process)
