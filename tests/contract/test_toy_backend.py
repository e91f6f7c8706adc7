"""A backend is the seam's protocols alone (ADR 0032): the toy backend, which the log contract
suite runs against (``test_log_contract``), knows nothing of the engine's storage but
``engine.storage.seam``, and the engine is told nothing about it."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
from pathlib import Path

from engine import open_notifier
from engine.log import open_log_with
from engine.storage import WriterCapabilities
from tests.support import toy_storage
from tests.support.tickets import MACHINES, TicketOpened, TicketTitles

ROOT = Path(__file__).resolve().parents[2]
# What the toy may take from the engine: the seam, and the plain values every backend shares.
ALLOWED = {"engine.storage.seam", "engine.chain", "engine.errors"}


def test_toy_takes_nothing_from_the_engine_but_the_seam() -> None:
    tree = ast.parse(Path(toy_storage.__file__).read_text())
    used = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engine")
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("engine")
    }
    assert used <= ALLOWED, sorted(used - ALLOWED)


def test_toy_the_engine_does_not_know_the_toy() -> None:
    engine = [p for p in (ROOT / "engine").rglob("*.py") if "toy" in p.read_text().lower()]
    assert not engine


def test_toy_is_a_storage_and_a_writer_by_the_protocols() -> None:
    """mypy, strict, holds the toy to ``Storage`` and ``Writer`` as written: every member, and
    every signature."""
    program = (
        "from pathlib import Path\n"
        "from engine.storage.seam import Storage, Writer\n"
        "from tests.support.toy_storage import ToyDatabase, ToyStorage, ToyWriter\n"
        "storage: Storage = ToyStorage(Path('.'))\n"
        "writer: Writer = ToyWriter(ToyDatabase())\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file=",
            "--strict",
            "--no-incremental",
            "-c",
            program,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_toy_declares_nothing_beyond_the_minimum(tmp_path: Path) -> None:
    storage = toy_storage.ToyStorage(tmp_path)
    assert storage.wakeups() is None and storage.lost() is None
    assert storage.writer().capabilities == WriterCapabilities()


def test_toy_log_wakes_a_waiter_of_another_handle_by_the_declared_defaults(
    tmp_path: Path,
) -> None:
    """No wake-ups of its own: the notifier polls the toy's data version, and a waiter on one
    handle sees a commit made through another, with the read model folded."""
    reader = open_log_with(toy_storage.ToyStorage(tmp_path), MACHINES, [TicketTitles()])
    writer = open_log_with(toy_storage.ToyStorage(tmp_path), MACHINES, [TicketTitles()])
    notifier = open_notifier(reader)
    try:
        assert notifier.listening.wait(5)
        woke: list[bool] = []
        waiter = threading.Thread(target=lambda: woke.append(reader.wait_for(0, 10)))
        waiter.start()
        writer.append("ticket:a", 0, [TicketOpened(title="hello")])
        waiter.join(10)
        assert woke == [True]
        assert reader.head() == 1
        assert reader.content_hash() == writer.content_hash() == reader.rebuild()
        assert reader.verify_chain() == []
    finally:
        notifier.stop()
        reader.close()
        writer.close()
