"""Real workloads under a power cut (``tests.support.powercut``), and what must hold after it.

A workload runs the log's real write path (``open_log``, the group commit, the domain engine,
the checkpoint thread, ``copy_log``) in a fresh directory while ``Disk`` records every write
and sync; each caller's acknowledgement (an append or command that returned) is noted with
its time. At the cut every file operation fails, so the workload stops; its files are closed,
rewritten as the disk kept them, and reopened through the unix VFS. ``check`` then asks what
ADR 0003 promises: ``PRAGMA integrity_check`` ok, ``verify`` (the audit API behind
``foldline verify``) ok, projections equal to a rebuild, and at ``full`` every acknowledged
event there; at ``normal`` only a suffix of the acknowledged commits may be missing, whole.

A cut is named by ``(workload, sync, seed)``: the seed picks the operation the power fails at
and how the disk loses what was not synced. Threads interleave as the scheduler lets them, so
a replay repeats the cut and the loss, not necessarily every thread's order.
"""

from __future__ import annotations

import contextlib
import gc
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from engine import EngineError, FixedClock, Log, MachineSpec, NotALog, Projection, open_log
from engine.audit.verifier import verify
from engine.domain import MACHINES as DOMAIN_MACHINES
from engine.domain import commands as c
from engine.domain.rules import Settings
from engine.storage.copy import copy_log
from engine.storage.sqlite import checkpoint as checkpoint_module
from engine.storage.sqlite import writer as writer_module
from projections import default_projections, open_engine
from tests.support.powercut import MODES, Disk, PowerCut
from tests.support.tickets import MACHINES, TicketNoted, TicketOpened, TicketTitles

DB = "log" + "/foldline.db"
SOURCE = "source.db"
TARGET = "copies/target.db"
SYNCS = ("full", "normal")


@dataclass(frozen=True)
class Ack:
    """A commit its caller was answered for: its positions and what they must hold."""

    first: int
    last: int
    streams: frozenset[str]
    first_version: int | None  # one stream's versions first_version.. (None: not known)
    at: float  # time.monotonic() of the answer


@dataclass
class Acks:
    """The acknowledgements of one run, from any thread."""

    items: list[Ack] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ack: Ack) -> None:
        with self.lock:
            self.items.append(ack)


@dataclass
class Outcome:
    """One cut and what it cost: acknowledged commits lost and how old the oldest was."""

    workload: str
    sync: str
    seed: int
    mode: str
    cut_at: int
    operations: int  # writes and syncs counted up to the cut
    acked: int
    lost: int = 0
    window_ms: float = 0.0
    fates: dict[str, str] = field(default_factory=dict)

    def name(self) -> str:
        return f"{self.workload}:{self.sync}:{self.seed}"


@contextlib.contextmanager
def stopped_by_the_cut(disk: Disk) -> Iterator[None]:
    """Any failure once the power is off ends the workload; before it, it is a real failure."""
    try:
        yield
    except (EngineError, apsw.Error, OSError):
        if not disk.is_cut:
            raise


def _close(log: Log) -> None:
    with contextlib.suppress(EngineError, apsw.Error, OSError):
        log.close()


def _appended(acks: Acks, result: object) -> None:
    acks.add(
        Ack(
            result.first_position,  # type: ignore[attr-defined]
            result.last_position,  # type: ignore[attr-defined]
            frozenset({result.stream_id}),  # type: ignore[attr-defined]
            result.first_version,  # type: ignore[attr-defined]
            time.monotonic(),
        )
    )


def _append_tickets(log: Log, disk: Disk, acks: Acks, name: str, count: int, pad: int) -> None:
    rng = random.Random(name)
    with stopped_by_the_cut(disk):
        for i in range(count):
            events = [TicketOpened(title=f"{name}.{i}" + "x" * pad)]
            events += [TicketNoted(text=f"{name}.{i}.{n}") for n in range(rng.randrange(3))]
            _appended(acks, log.append(f"ticket:{name}.{i}", 0, events))


# -- workloads -------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    run: Callable[[Path, str, Disk, Acks], None]
    setup: Callable[[Path], None] = lambda root: None
    machines: Sequence[MachineSpec] = tuple(MACHINES)
    projections: Callable[[], Sequence[Projection]] = lambda: [TicketTitles()]


def _tickets_log(root: Path, sync: str = "full") -> Log:
    return open_log(root / DB, MACHINES, [TicketTitles()], sync=sync)  # type: ignore[arg-type]


def _setup_log(root: Path) -> None:
    _tickets_log(root).close()


def run_single(root: Path, sync: str, disk: Disk, acks: Acks) -> None:
    """One caller, appends of one to three events, one after another."""
    log = _tickets_log(root, sync)
    try:
        _append_tickets(log, disk, acks, "one", 24, 0)
    finally:
        _close(log)


def run_create(root: Path, sync: str, disk: Disk, acks: Acks) -> None:
    """A log made inside the window: the file, its folder, its WAL, then the first appends."""
    with stopped_by_the_cut(disk):
        log = _tickets_log(root, sync)
        try:
            _append_tickets(log, disk, acks, "new", 4, 0)
        finally:
            _close(log)


GROUP_THREADS = 6


def run_group(root: Path, sync: str, disk: Disk, acks: Acks) -> None:
    """Six callers at once: their appends share transactions and syncs (the group commit)."""
    log = _tickets_log(root, sync)
    start = threading.Barrier(GROUP_THREADS)

    def caller(n: int) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait(timeout=30)
        _append_tickets(log, disk, acks, f"g{n}", 6, 0)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(GROUP_THREADS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a caller is stuck"
    finally:
        _close(log)


# WAL pages before the checkpoint thread is asked (SQLite's default is 1,000): low, so that
# a short run crosses it several times, and the WAL restarts from its head in between.
SMALL_CHECKPOINT = 6


@contextlib.contextmanager
def small_checkpoints() -> Iterator[None]:
    saved = (checkpoint_module.CHECKPOINT_PAGES, writer_module.CHECKPOINT_PAGES)
    checkpoint_module.CHECKPOINT_PAGES = writer_module.CHECKPOINT_PAGES = SMALL_CHECKPOINT
    try:
        yield
    finally:
        checkpoint_module.CHECKPOINT_PAGES, writer_module.CHECKPOINT_PAGES = saved


def run_checkpoint(root: Path, sync: str, disk: Disk, acks: Acks) -> None:
    """Appends of 1.5 KiB titles past a small checkpoint threshold: the checkpoint thread
    copies the WAL into the file while the writer commits, and the writer finishes it."""
    with small_checkpoints():
        log = _tickets_log(root, sync)
        try:
            _append_tickets(log, disk, acks, "ck", 24, 1500)
        finally:
            _close(log)


def _commanded(acks: Acks, result: c.CommandResult | object) -> None:
    first, last = result.first_position, result.last_position  # type: ignore[attr-defined]
    if last:
        streams = frozenset(result.streams)  # type: ignore[attr-defined]
        acks.add(Ack(first, last, streams, None, time.monotonic()))


def run_takeover(root: Path, sync: str, disk: Disk, acks: Acks) -> None:
    """Two holders of one log (two writer connections): ``a`` holds the lease and works,
    ``b`` takes the stale lease over (a new epoch), ``a`` is fenced out, ``b`` works on."""
    clock = FixedClock()
    settings = Settings(lease_stale_s=45)
    with stopped_by_the_cut(disk):
        a = open_engine(root / DB, settings, clock=clock, sync=sync)  # type: ignore[arg-type]
        b = open_engine(root / DB, settings, clock=clock, sync=sync)  # type: ignore[arg-type]
        try:
            _commanded(acks, a.handle(c.AcquireLease(holder="a", host="h1", pid=1)))
            a.log.fence(1)
            for n in range(4):
                _commanded(acks, a.handle(c.CreateSession(session_id=f"a{n}")))
            clock.advance(60)
            _commanded(acks, b.handle(c.TakeOverLease(holder="b", host="h2", pid=2)))
            b.log.fence(2)
            with contextlib.suppress(EngineError):  # fenced out, unless the power is off
                a.handle(c.CreateSession(session_id="late"))
                if not disk.is_cut:
                    raise AssertionError("the old holder wrote after the takeover")
            for n in range(4):
                _commanded(acks, b.handle(c.CreateSession(session_id=f"b{n}")))
        finally:
            _close(a.log)
            _close(b.log)


def _setup_source(root: Path) -> None:
    log = open_log(root / SOURCE, MACHINES, [TicketTitles()])
    for i in range(30):
        log.append(f"ticket:src.{i}", 0, [TicketOpened(title=f"src.{i}"), TicketNoted()])
    log.close()


COPIED = 60  # the source's events


def run_copy(root: Path, sync: str, disk: Disk, acks: Acks) -> None:
    """``foldline copy`` into a new file (``copy_log``): one transaction, then the check."""
    del sync  # a copy's target is written at the default level, full
    with stopped_by_the_cut(disk):
        report = copy_log(root / SOURCE, root / TARGET)
        acks.add(Ack(1, report.events, frozenset(), None, time.monotonic()))


WORKLOADS = {
    w.name: w
    for w in (
        Workload("single", run_single, _setup_log),
        Workload("create", run_create),
        Workload("group", run_group, _setup_log),
        Workload("checkpoint", run_checkpoint, _setup_log),
        Workload(
            "takeover",
            run_takeover,
            lambda root: open_engine(root / DB).log.close(),
            DOMAIN_MACHINES,
            default_projections,
        ),
        Workload("copy", run_copy, _setup_source),
    )
}


# -- a cut, and what must hold after it -------------------------------------------------


def operations(workload: Workload, sync: str, root: Path) -> int:
    """How many writes and syncs the workload makes with the power on (a dry run)."""
    root.mkdir(parents=True)
    workload.setup(root)
    disk = Disk(root, None, "drop", random.Random(0))
    with PowerCut(disk):
        workload.run(root, sync, disk, Acks())
    return disk.operations


def cut(
    workload: Workload,
    sync: str,
    seed: int,
    root: Path,
    dry_operations: int,
    *,
    mode: str | None = None,
    at: int | None = None,
) -> Outcome:
    """Run ``workload`` in ``root`` with the power failing where ``seed`` says; check it.

    Raises:
        AssertionError: something the log promises did not hold (the message names the cut).
    """
    rng = random.Random(seed)
    # Up to a tenth past the dry run's count: some cuts fall after the last operation.
    cut_at = rng.randint(1, dry_operations + dry_operations // 10 + 1)
    mode = mode or rng.choice(MODES)
    cut_at = at or cut_at
    root.mkdir(parents=True)
    workload.setup(root)
    disk = Disk(root, cut_at, mode, rng)
    acks = Acks()
    with PowerCut(disk):
        workload.run(root, sync, disk, acks)
        disk.cut_now()
    _no_connection_left(root)
    outcome = Outcome(workload.name, sync, seed, mode, cut_at, disk.operations, len(acks.items))
    outcome.fates = disk.reboot()
    try:
        if workload.name == "copy":
            _check_copy(root, acks.items, outcome)
        else:
            _check_log(root / DB, workload, sync, acks.items, disk, outcome)
    except AssertionError as ex:
        raise AssertionError(
            f"power cut {outcome.name()} (mode {mode}, at operation {cut_at}) broke a"
            f" promise: {ex}\nfiles after the cut: {outcome.fates}\nreplay:"
            f" FOLDLINE_POWERCUT={outcome.name()} .venv/bin/python -m pytest"
            " tests/crash/test_power_loss.py -k replay"
        ) from ex
    return outcome


def _no_connection_left(root: Path) -> None:
    """Every connection the workload opened is closed: one left open would keep the old
    WAL index mapped in this process, and a reopen would read the rebooted files through it.
    """
    gc.collect()
    left = [c.filename for c in apsw.connections() if c.filename.startswith(str(root.resolve()))]
    assert not left, f"connections left open after the workload: {left}"


def integrity(path: Path) -> None:
    conn = apsw.Connection(str(path))
    try:
        found = conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()
    assert found == [("ok",)], f"integrity_check: {found}"


def _check_log(
    db: Path, workload: Workload, sync: str, acks: list[Ack], disk: Disk, outcome: Outcome
) -> None:
    if not db.exists():
        assert not acks, f"the log file is gone, {len(acks)} commits were acknowledged"
        return
    integrity(db)
    try:
        report = verify(db, workload.machines, workload.projections())
    except NotALog:  # cut while the file was made: a restart makes it anew (checked below)
        report = None
    log = open_log(db, workload.machines, workload.projections())
    try:
        assert log.content_hash() == log.rebuild(), "projections differ from a rebuild"
        head = log.head()
        rows = {e.position: (e.stream_id, e.version) for e in log.iter_all()}
    finally:
        log.close()
    if report is None:
        report = verify(db, workload.machines, workload.projections())
    assert report.ok, f"verify: {report.violations[:5]}"
    lost = [a for a in acks if a.last > head]
    for ack in acks:
        assert not ack.first <= head < ack.last, f"commit {ack} is cut in two at {head}"
        if ack.last > head:
            continue
        for offset, position in enumerate(range(ack.first, ack.last + 1)):
            stream_id, version = rows[position]
            assert stream_id in ack.streams, f"position {position} holds {stream_id}, not {ack}"
            if ack.first_version is not None:
                assert version == ack.first_version + offset, f"position {position}: {ack}"
    if sync == "full":
        assert not lost, f"{len(lost)} acknowledged commits lost at full: first {lost[0]}"
    elif lost:
        assert disk.cut_time is not None
        outcome.lost = len(lost)
        outcome.window_ms = (disk.cut_time - min(a.at for a in lost)) * 1000


def _check_copy(root: Path, acks: list[Ack], outcome: Outcome) -> None:
    integrity(root / SOURCE)
    assert verify(root / SOURCE, MACHINES, [TicketTitles()]).ok, "the source was harmed"
    target = root / TARGET
    if not target.exists():
        assert not acks, "the acknowledged copy is gone"
        return
    integrity(target)
    conn = apsw.Connection(str(target))
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema")}
        events = (
            conn.execute("SELECT count(*) FROM events").fetchall()[0][0]
            if "events" in tables
            else 0
        )
    finally:
        conn.close()
    if acks:
        assert events == COPIED, f"the acknowledged copy holds {events} of {COPIED} events"
    assert events in (0, COPIED), f"a partial copy: {events} of {COPIED} events"
    if events:
        report = verify(target, MACHINES, [TicketTitles()])
        assert report.ok, f"verify of the copy: {report.violations[:5]}"


__all__ = [
    "SYNCS",
    "WORKLOADS",
    "Ack",
    "Outcome",
    "Workload",
    "cut",
    "operations",
]
