"""Declarations in the log (ADR 0060), upcasting (ADR 0061) and the replay check, through the
real ``foldline`` command on real files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import apsw
import msgspec

from engine import open_log
from engine.declarations import LogDeclarations, declarations_of, digest_of, with_system
from engine.machines import Machines
from tests.cli.test_audit import forge_chain, tamper
from tests.support.cli import foldline
from tests.support.doors import DOOR, DoorClosed, DoorInstalled, DoorOpened, DoorsProjection
from tests.support.machine_versions import (
    DOOR_NAMED,
    DOOR_NO_CLOSING,
    DOOR_RENAMED,
    DoorOpenersProjection,
    DoorSwungOpen,
)

VERSIONS = "tests.support.machine_versions"


def _declarations(path: Path) -> list[tuple[int, str]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [
            (position, json.loads(payload)["digest"])
            for position, payload in conn.execute(
                "SELECT position, payload FROM events WHERE stream_id = 'log:declarations'"
                " ORDER BY position"
            )
        ]
    finally:
        conn.close()


def _json(done: Any) -> dict[str, Any]:
    assert done.stdout, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def door_log_changed_between_runs(path: Path) -> None:
    """Run 1 under the door as first released (a door opened and closed again), run 2 under a
    revision that can no longer close a door."""
    log = open_log(path, [DOOR], [DoorsProjection()], record_declarations=True)
    log.append("door:a", 0, [DoorInstalled(where="hall"), DoorOpened(by="ann"), DoorClosed()])
    log.close()
    log = open_log(path, [DOOR_NO_CLOSING], record_declarations=True)
    log.append("door:b", 0, [DoorInstalled(where="yard"), DoorOpened(by="bob")])
    log.close()


def test_declarations_recorded_once_per_change_before_the_first_event_under_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "doors.db"
    door_log_changed_between_runs(path)
    log = open_log(path, [DOOR_NO_CLOSING], record_declarations=True)  # unchanged: none more
    log.append("door:c", 0, [DoorInstalled()])
    log.close()
    recorded = _declarations(path)
    assert [position for position, _ in recorded] == [1, 5]
    assert recorded[0][1] == digest_of(declarations_of(Machines(with_system([DOOR]))))
    assert recorded[1][1] == digest_of(declarations_of(Machines(with_system([DOOR_NO_CLOSING]))))


def test_declarations_a_changed_machine_leaves_a_log_that_verifies_by_its_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "doors.db"
    door_log_changed_between_runs(path)
    done = foldline("verify", str(path), "--machines", f"{VERSIONS}:NO_CLOSING")
    report = _json(done)
    assert (done.returncode, report["ok"], report["events"]) == (0, True, 7), done.stderr
    # The same code, asked to judge the whole history alone, refuses run 1's closing.
    done = foldline("replay", str(path), "--with", f"{VERSIONS}:NO_CLOSING")
    replayed = _json(done)
    assert done.returncode == 1 and not replayed["ok"]
    assert replayed["machines"]["door"]["position"] == 4
    assert replayed["machines"]["door"]["event_type"] == "door.closed"
    assert "door: the new code first judges otherwise at position 4" in done.stderr
    print(f"replay (breaking change), exit {done.returncode}:\n{done.stderr}{done.stdout}")


def test_declarations_rebuild_state_and_diff_judge_by_the_record(tmp_path: Path) -> None:
    """``rebuild``, ``state`` and ``diff`` judge each event by the declarations in force when
    it was recorded, as ``verify`` does: run 1's closing, refused by the code, is accepted."""
    path = tmp_path / "doors.db"
    door_log_changed_between_runs(path)
    machines = ["--machines", f"{VERSIONS}:NO_CLOSING"]
    done = foldline("state", str(path), *machines)
    assert done.returncode == 0 and _json(done)["door:a"]["state"] == "closed", done.stderr
    copy = tmp_path / "copy.db"
    shutil.copy(path, copy)
    done = foldline("diff", str(path), str(copy), "--json", *machines)
    assert done.returncode == 0, done.stderr
    assert _json(done)["judged"] == {"a": [], "b": []}
    log = open_log(path, [DOOR_NO_CLOSING])
    streams = log.content_hash()["streams"]
    log.close()
    done = foldline("rebuild", str(path), *machines)
    assert done.returncode == 0, done.stderr
    rebuilt = _json(done)
    assert rebuilt["changed"] == [] and rebuilt["projections"]["streams"] == streams


def test_declarations_swapped_in_the_file_are_found(tmp_path: Path) -> None:
    clean = tmp_path / "doors.db"
    door_log_changed_between_runs(clean)
    machines = ["--machines", f"{VERSIONS}:NO_CLOSING"]
    # Run 1's declarations swapped for run 2's: a log whose run 1 broke its own rules.
    body = declarations_of(Machines(with_system([DOOR_NO_CLOSING])))
    forged = msgspec.json.encode(LogDeclarations(digest=digest_of(body), declarations=body))
    swap = f"UPDATE events SET payload = X'{forged.hex()}' WHERE position = 1"
    swapped = tmp_path / "swapped.db"
    shutil.copy(clean, swapped)
    tamper(swapped, swap)
    done = foldline("verify", str(swapped), *machines)
    found = {(v["position"], v["kind"]) for v in _json(done)["violations"]}
    assert done.returncode == 1 and (1, "hash_mismatch") in found, found
    # The chain rewritten around the swap: the recorded rules do not know run 1's closing.
    forged_chain = tmp_path / "forged.db"
    shutil.copy(clean, forged_chain)
    forge_chain(forged_chain, swap)
    done = foldline("verify", str(forged_chain), *machines)
    found = {(v["position"], v["kind"]) for v in _json(done)["violations"]}
    assert done.returncode == 1 and (4, "undecodable") in found, found
    # ...and so do rebuild (which then writes nothing), state and diff.
    before = forged_chain.read_bytes()
    done = foldline("rebuild", str(forged_chain), *machines)
    rebuilt = _json(done)
    assert (done.returncode, rebuilt["rebuilt"]) == (1, False), done.stderr
    assert (4, "undecodable") in {(v["position"], v["kind"]) for v in rebuilt["violations"]}
    assert forged_chain.read_bytes() == before
    done = foldline("state", str(forged_chain), "--at", "4", *machines)
    assert done.returncode == 1 and _json(done)["door:a"]["state"] == "closed"
    assert "position 4: undecodable" in done.stderr
    assert foldline("state", str(forged_chain), "--at", "3", *machines).returncode == 0
    done = foldline("diff", str(clean), str(forged_chain), "--json", *machines)
    judged = _json(done)["judged"]
    assert done.returncode == 1 and judged["a"] == [], judged
    assert (4, "undecodable") in {(v["position"], v["kind"]) for v in judged["b"]}
    done = foldline("diff", str(clean), str(forged_chain), *machines)
    assert "B breaks its recorded rules: position 4: undecodable" in done.stdout
    # The declarations edited without their digest.
    edited = tmp_path / "edited.db"
    shutil.copy(clean, edited)
    forge_chain(
        edited,
        "UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), '\"closed\"',"
        " '\"shut\"') AS BLOB) WHERE position = 1",
    )
    done = foldline("verify", str(edited), *machines)
    found = {(v["position"], v["kind"]) for v in _json(done)["violations"]}
    assert done.returncode == 1 and (1, "declarations_digest") in found, found


def test_declarations_name_a_recorded_guard_the_code_no_longer_has(tmp_path: Path) -> None:
    path = tmp_path / "doors.db"
    log = open_log(path, [DOOR_NAMED], record_declarations=True)
    log.append("door:a", 0, [DoorInstalled(where="hall"), DoorOpened(by="ann")])
    log.close()
    done = foldline("verify", str(path), "--machines", "tests.support.doors:DOOR")
    found = [(v["position"], v["kind"], v["detail"]) for v in _json(done)["violations"]]
    assert done.returncode == 1 and [f[:2] for f in found] == [(3, "missing_guard")], found
    assert "guard 'is_opened_by_someone' of machine 'door'" in found[0][2]
    done = foldline("verify", str(path), "--machines", f"{VERSIONS}:DOOR_NAMED")
    assert done.returncode == 0, done.stdout


def test_replay_passes_a_compatible_change_and_takes_a_plugin_file(tmp_path: Path) -> None:
    path = tmp_path / "doors.db"
    log = open_log(path, [DOOR], [DoorsProjection()], record_declarations=True)
    log.append("door:a", 0, [DoorInstalled(where="hall"), DoorOpened(by="ann"), DoorClosed()])
    log.close()
    before = path.read_bytes()
    done = foldline("replay", str(path), "--with", f"{VERSIONS}:LOCKING")
    replayed = _json(done)
    assert (done.returncode, replayed["ok"], replayed["machines"]) == (0, True, {}), done.stderr
    assert replayed["projections"] == {} and replayed["events"] == 4
    assert "accepts all 4 events and folds them the same" in done.stderr
    plugin = tmp_path / "new_doors.py"
    plugin.write_text(
        f"from {VERSIONS} import DOOR_NO_CLOSING\n\nDECLARATIONS = [DOOR_NO_CLOSING]\n"
    )
    done = foldline("replay", str(path), "--with", str(plugin))
    replayed = _json(done)
    assert done.returncode == 1 and replayed["machines"]["door"]["position"] == 4, done.stderr
    assert path.read_bytes() == before  # nothing written


def test_replay_names_a_projection_that_would_fold_differently(tmp_path: Path) -> None:
    path = tmp_path / "doors.db"
    log = open_log(path, [DOOR], [DoorsProjection()])
    log.append("door:a", 0, [DoorInstalled(where="hall"), DoorOpened(by="ann")])
    log.close()
    plugin = tmp_path / "recount.py"
    plugin.write_text(
        "from typing import Any\n"
        "from engine.projection import handles\n"
        "from tests.support.doors import DOOR, DoorOpened, DoorsProjection\n\n\n"
        "class Recount(DoorsProjection):\n"
        "    @handles(DoorOpened)\n"
        "    def on_door_opened(self, cur: Any, e: Any) -> None:\n"
        "        cur.execute('UPDATE doors SET state = ?, opened = opened + 2"
        " WHERE door_id = ?', (e.state, e.stream_id[5:]))\n\n\n"
        "DECLARATIONS = [DOOR, Recount]\n"
    )
    done = foldline("replay", str(path), "--with", str(plugin))
    replayed = _json(done)
    assert done.returncode == 1 and replayed["machines"] == {}, done.stderr
    assert list(replayed["projections"]) == ["doors"]


def test_upcaster_is_read_by_every_audit_command(tmp_path: Path) -> None:
    """A log of the first door (``door.opened {by}``), audited by code that replaced the tag
    with ``door.swung_open {who}`` and registered an upcaster: the stored bytes stay as they
    are, and every command reads the event as it is today."""
    path = tmp_path / "doors.db"
    log = open_log(path, [DOOR], [DoorsProjection()], record_declarations=True)
    log.append("door:a", 0, [DoorInstalled(where="hall"), DoorOpened(by="ann"), DoorClosed()])
    log.close()
    copy = tmp_path / "copy.db"
    shutil.copy(path, copy)
    renamed = ["--machines", f"{VERSIONS}:RENAMED"]
    stored = foldline("export", str(path)).stdout
    log = open_log(path, [DOOR_RENAMED], [DoorOpenersProjection()], record_declarations=True)
    try:  # the new code reads the old event as it is today
        assert [e.event for e in log.read_stream("door:a")][1] == DoorSwungOpen(who="ann")
        assert log.connection().execute("SELECT * FROM door_openers").fetchall() == [("a", "ann")]
        log.append("door:b", 0, [DoorInstalled(), DoorSwungOpen(who="bob")])
    finally:
        log.close()
    done = foldline("rebuild", str(path), *renamed)
    assert done.returncode == 0, done.stderr
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    assert sorted(conn.execute("SELECT * FROM door_openers")) == [("a", "ann"), ("b", "bob")]
    conn.close()
    done = foldline("verify", str(path), *renamed)
    assert (done.returncode, _json(done)["ok"]) == (0, True), done.stdout
    done = foldline("replay", str(path), "--with", f"{VERSIONS}:RENAMED")
    assert (done.returncode, _json(done)["machines"]) == (0, {}), done.stdout
    # The stored rows are what was written: the copy is the log's prefix, as exported.
    assert foldline("export", str(path), "--to", "4").stdout == stored
    done = foldline("diff", str(copy), str(path), "--json", *renamed)
    assert done.returncode == 1 and _json(done)["common_prefix"] == 4
    state = _json(foldline("state", str(path), "--at", "4", *renamed))
    assert state["door:a"]["state"] == "closed"
    assert state["log:declarations"]["version"] == 1
