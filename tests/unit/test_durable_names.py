"""Every file foldline makes and relies on across a crash is named durably (ADR 0055): its
directory is synced after the file is linked, renamed or created into it.

The power-cut VFS proves this for the log and a copy's target (``tests/crash/test_power_loss.py``);
these files are written by Python, not SQLite, so here each writer runs for real with the
directory sync recorded, and the file must already be in place when its directory is synced.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from adapters.front import session_dir
from adapters.services import checkpoints, writers
from adapters.settings import operator_token
from adapters.settings.config import RunUser
from adapters.system import leasefile, log_anchor
from engine.audit.anchor import SERVER_FORMAT, ServerAnchor
from engine.storage import durable

Synced = list[tuple[str, frozenset[str]]]


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Synced:
    """Each directory synced, with the names it held at that moment."""
    seen: Synced = []

    def fsync_dir(directory: str | os.PathLike[str]) -> None:
        seen.append((os.fspath(directory), frozenset(os.listdir(directory))))
        real(directory)

    real = durable.fsync_dir
    for module in (leasefile, log_anchor, operator_token, writers, checkpoints, session_dir):
        monkeypatch.setattr(module, "fsync_dir", fsync_dir)
    return seen


def _named_durably(synced: Synced, path: Path) -> bool:
    return any(folder == str(path.parent) and path.name in names for folder, names in synced)


RECORD = leasefile.LeaseRecord("me", 1, "host", 1, 0.0)
WRITERS: dict[str, Callable[[Path], Path]] = {
    "lease claim": lambda tmp: (lambda f: (f.claim(RECORD), f.path)[1])(
        leasefile.LeaseFile(tmp / "foldline.db")
    ),
    "lease replace": lambda tmp: (lambda f: (f.replace(RECORD), f.path)[1])(
        leasefile.LeaseFile(tmp / "foldline.db")
    ),
    "anchor": lambda tmp: (
        log_anchor.write(
            tmp / "a" / "anchor.json", ServerAnchor(SERVER_FORMAT, 1, "00", "t", "d", 1, 2)
        ),
        tmp / "a" / "anchor.json",
    )[1],
    "token create": lambda tmp: (operator_token.create(tmp / "t" / "token"), tmp / "t" / "token")[
        1
    ],
    "token rotate": lambda tmp: (operator_token.rotate(tmp / "token"), tmp / "token")[1],
    "checkpoint note": lambda tmp: (
        checkpoints.write_note(tmp / "n" / "note", "x"),
        tmp / "n" / "note",
    )[1],
    "kept patch": lambda tmp: (
        writers.Worktrees.keep(
            types.SimpleNamespace(  # type: ignore[arg-type]
                patches=tmp / "patches", patch_path=lambda job: tmp / "patches" / f"{job}.patch"
            ),
            "j1",
            b"diff",
        ),
        tmp / "patches" / "j1.patch",
    )[1],
    "session directory": lambda tmp: session_dir.ensure(
        tmp, "sid-1", RunUser(os.getuid(), os.getgid(), "me")
    ),
}


@pytest.mark.parametrize("what", sorted(WRITERS))
def test_durable_names_each_file_is_in_place_when_its_directory_is_synced(
    what: str, tmp_path: Path, synced: Synced
) -> None:
    made = WRITERS[what](tmp_path)
    assert made.exists()
    assert _named_durably(synced, made), f"{what}: {made.name} not in any synced {synced}"


def test_durable_names_make_dirs_syncs_every_new_folder_into_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: Synced = []
    real = durable.fsync_dir
    monkeypatch.setattr(
        durable,
        "fsync_dir",
        lambda d: (seen.append((os.fspath(d), frozenset(os.listdir(d)))), real(d))[1],
    )
    durable.make_dirs(tmp_path / "a" / "b")
    assert _named_durably(seen, tmp_path / "a")
    assert _named_durably(seen, tmp_path / "a" / "b")
