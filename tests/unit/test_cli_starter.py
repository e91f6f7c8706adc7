"""``tests.support.cli.foldline`` forks its commands from a process that imported the CLI
once: each must answer as ``python -m adapters.cli`` started afresh does."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.domain import commands as c
from projections import open_engine
from tests.support.cli import ROOT, foldline


def _fresh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "a log.db"
    engine = open_engine(path)
    engine.handle(c.CreateSession(session_id="s", start_run_id="r"))
    engine.log.close()
    return path


@pytest.mark.parametrize(
    "args",
    [
        ("verify", "{db}"),
        ("export", "{db}"),
        ("history", "{db}", "session:s"),
        ("verify", "{missing}"),
        ("no-such-command",),
        ("verify", "--help"),
    ],
)
def test_a_forked_command_answers_as_a_fresh_one(
    db: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    argv = [a.format(db=db, missing=tmp_path / "missing.db") for a in args]
    forked, fresh = foldline(*argv), _fresh(*argv)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr,
    )  # fmt: skip
    assert forked.stdout or forked.stderr  # each says something


def test_a_forked_command_has_the_callers_environment_and_nothing_else(db: Path) -> None:
    # FOLDLINE_MACHINES naming a module that is not there: the command must see it and refuse.
    env = {"PATH": "/usr/bin:/bin", "FOLDLINE_MACHINES": "no_such_module:MACHINES"}
    forked, fresh = foldline("verify", str(db), env=env), _fresh("verify", str(db), env=env)
    assert forked.returncode == fresh.returncode != 0, forked
    assert forked.stderr == fresh.stderr and "no_such_module" in forked.stderr
    assert foldline("verify", str(db)).returncode == 0  # the next command has the default again


def test_a_forked_command_past_its_timeout_is_killed_and_the_next_one_runs(db: Path) -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        foldline("tail", "--follow", str(db), timeout=1.5)
    assert 1.5 <= time.monotonic() - started < 30
    assert b"session.created" in (raised.value.output or b"")  # what it printed before
    assert foldline("verify", str(db)).returncode == 0
