"""The audit commands on logs of a user-declared machine (docs/embedding.md's door), found through
``--machines``, ``FOLDLINE_MACHINES`` or an installed entry point, under a path with ``#`` and
a space in it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine import FixedClock, open_log
from engine.domain import commands as c
from projections import open_engine
from tests.cli.test_audit import tamper
from tests.support import doors
from tests.support.cli import foldline as run_cli

ROOT = Path(__file__).resolve().parents[2]

DOORS = Path(__file__).resolve().parents[1] / "support" / "doors.py"


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    """A folder holding the ``doors`` module and an installed distribution whose entry point
    in ``foldline.machines`` names it."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(DOORS, site / "doors.py")
    info = site / "doors_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: doors-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[foldline.machines]\ndoors = doors:DECLARATIONS\n")
    return site


def foldline(
    *args: str, path: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI with ``path`` (the doors module alone, or with its distribution) importable."""
    environ = {k: v for k, v in os.environ.items() if k != "FOLDLINE_MACHINES"}
    if path is not None:
        environ["PYTHONPATH"] = str(path)
    return run_cli(*args, env={**environ, **(env or {})})


def door_log(path: Path) -> None:
    log = open_log(path, [doors.DOOR], [doors.DoorsProjection()], clock=FixedClock())
    for name in ("front", "back"):
        log.append(f"door:{name}", 0, [doors.DoorInstalled(where="hall")])
        log.append(f"door:{name}", 1, [doors.DoorOpened(by="ana"), doors.DoorClosed()])
    log.append("door:front", 3, [doors.DoorOpened(by="bo")])
    log.close()


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def odd_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "audit #1 copy"
    folder.mkdir()
    return folder


def test_audit_door_log_verifies_with_declarations_from_each_source(
    plugin: Path, odd_folder: Path
) -> None:
    db = odd_folder / "doors log.db"
    door_log(db)
    before = db.read_bytes()
    bare = foldline("verify", str(db))
    report = _json(bare)
    assert bare.returncode == 1
    assert [v["kind"] for v in report["violations"]] == ["undeclared_kind"]  # once, not x7
    assert "'door'" in report["violations"][0]["detail"]
    assert "doors" in report["unchecked_projections"]
    only_module = plugin.parent / "module-only"
    only_module.mkdir()
    shutil.copy(plugin / "doors.py", only_module)
    by_option = foldline("verify", str(db), "--machines", "doors:DECLARATIONS", path=only_module)
    by_env = foldline(
        "verify", str(db), path=only_module, env={"FOLDLINE_MACHINES": "doors:DECLARATIONS"}
    )
    by_entry_point = foldline("verify", str(db), path=plugin)
    for done in (by_option, by_env, by_entry_point):
        assert done.returncode == 0, done.stderr
        assert _json(done)["ok"] and "unchecked_projections" not in _json(done)
    assert db.read_bytes() == before


def test_audit_door_log_through_every_raw_command_without_declarations(
    plugin: Path, odd_folder: Path
) -> None:
    db = odd_folder / "doors log.db"
    door_log(db)
    history = foldline("history", str(db), "door:front")
    assert history.returncode == 0, history.stderr
    assert [json.loads(line)["event"]["type"] for line in history.stdout.splitlines()] == [
        "door.installed",
        "door.opened",
        "door.closed",
        "door.opened",
    ]
    export = foldline("export", str(db))
    assert export.returncode == 0 and len(export.stdout.splitlines()) == 7
    assert json.loads(export.stdout.splitlines()[0])["event"] == {
        "type": "door.installed",
        "where": "hall",
    }
    state = _json(foldline("state", str(db)))
    assert state["door:front"]["state"] == "open" and state["door:back"]["state"] == "closed"
    tail = foldline("tail", str(db), "--lines", "3")
    assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 3
    anchor = _json(foldline("checkpoint", str(db)))
    assert anchor["position"] == 7 and anchor["streams"] == 2
    copy = odd_folder / "copy #2.db"
    shutil.copy(db, copy)
    same = foldline("diff", str(db), str(copy))
    assert same.returncode == 0 and same.stdout.startswith("identical: 7 events")
    rebuilt = foldline("rebuild", str(copy), "--machines", "doors:DECLARATIONS", path=plugin)
    assert rebuilt.returncode == 0 and _json(rebuilt)["changed"] == []


def test_audit_log_mixing_door_and_built_in_streams(plugin: Path, tmp_path: Path) -> None:
    db = tmp_path / "mixed.db"
    engine = open_engine(
        db,
        clock=FixedClock(),
        extra_machines=(doors.DOOR,),
        extra_projections=(doors.DoorsProjection(),),
    )
    engine.handle(c.CreateSession(session_id="s0", start_run_id="r0"))
    engine.log.append("door:front", 0, [doors.DoorInstalled(), doors.DoorOpened(by="ana")])
    engine.handle(c.AcceptJob(job_id="j0", session_id="s0", prompt="p"))
    engine.log.close()
    declared = foldline("verify", str(db), "--machines", "doors:DECLARATIONS", path=plugin)
    assert declared.returncode == 0, declared.stdout
    bare = _json(foldline("verify", str(db)))
    assert [v["kind"] for v in bare["violations"]] == ["undeclared_kind"]
    edited = tmp_path / "edited.db"
    shutil.copy(db, edited)
    tamper(
        edited,
        'UPDATE events SET payload = CAST(\'{"type":"door.opened","by":"eve"}\' AS BLOB)'
        " WHERE stream_id = 'door:front' AND version = 2",
    )
    report = _json(foldline("diff", str(db), str(edited), "--json"))
    assert report["changed"] == {"door:front": [2]} and report["chain"]["b"]
    assert foldline("verify", str(edited), path=plugin).returncode == 1


def test_audit_machines_option_refuses_what_it_cannot_load(tmp_path: Path) -> None:
    db = tmp_path / "any.db"
    open_log(db, []).close()
    for value in ("nocolon", "no_such_module:X", "json:dumps", "os:sep"):
        done = foldline("verify", str(db), "--machines", value)
        assert done.returncode == 2, (value, done.stdout)
        assert (
            done.stderr.startswith("foldline: invalid_argument:") and "Traceback" not in done.stderr
        )
