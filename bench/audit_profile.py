"""Where one share of ``verify``'s fast pass spends its CPU, on a log built once.

    python -m bench.audit_profile --keep FOLDER [--events N] [--runs 3]

Times, in this process, one of the two shares of the streams that ``verify`` gives each core:
``scan`` (its rows handed to Python with the hash stored before each, nothing done with them),
``scan+links`` (each row's chain link checked as well, as the fast pass does), ``legality``
(``bench.audit``'s legality floor: links and a (state, event type) lookup), ``complete_floor``
and ``read_model_floor`` (``bench.audit``'s, one share), ``read_back`` (the stored rows of the
domain read models in the share, handed to Python in key order as the comparison reads them,
nothing compared) and ``fast_pass`` (the whole share: links, replay, folds and the comparison
with the stored tables, whose part is printed apart). Prints the median process CPU seconds
of each and the rate two cores would reach if each did one share at that cost: an upper
bound, since it leaves out starting the workers. Then ``verify_vs_complete_floor`` as these
shares give it, and the most it can be while the stored rows are read back at all (the
complete floor over the complete floor plus ``read_back``). A profile, not a goal.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

from bench.audit import _complete_share, _legal_share, _share_rows, kept_log
from engine import chain
from engine.audit import reading, replay, tables
from engine.audit.replay import CHUNK, MMAP_BYTES
from engine.audit.tables import share_of
from engine.domain import MACHINES
from engine.machines import Machines
from engine.projection import ProjectionSet
from engine.streams import StreamsProjection
from projections import default_projections

PARTS = 2


SHARE_ROWS: dict[tuple[str, int], int] = {}  # events of a share, as `scan` counted them


def scan(path: str, part: int) -> int:
    with reading(path) as reader:
        reader.query(f"PRAGMA mmap_size = {MMAP_BYTES}")
        rows = SHARE_ROWS[path, part] = sum(1 for _ in _share_rows(reader, part, PARTS))
        return rows


def scan_and_links(path: str, part: int) -> int:
    with reading(path) as reader:
        reader.query(f"PRAGMA mmap_size = {MMAP_BYTES}")
        rows, linked = _share_rows(reader, part, PARTS), 0
        while chunk := list(islice(rows, CHUNK)):
            assert chain.links_hold(chunk)
            linked += len(chunk)
        return linked


def legality(path: str, part: int) -> int:
    return _legal_share(path, part, PARTS)


def complete_floor(path: str, part: int) -> int:
    return _complete_share(path, part, PARTS)


def read_model_floor(path: str, part: int) -> int:
    return _complete_share(path, part, PARTS, read_models=True)


def read_back(path: str, part: int) -> int:
    """The share's stored rows of every domain read model, as ``tables.compare_rows`` reads
    them (its query, in key order), handed to Python and dropped: the least a comparison with
    the stored tables costs. Returns the share's events as ``scan`` counted them, for the
    per-row figure."""
    with reading(path) as reader:
        reader.query(f"PRAGMA mmap_size = {MMAP_BYTES}")
        connection = reader.log.connection()
        connection.execute("BEGIN")
        for projection in default_projections():
            for table in projection.tables:
                key = tables.primary_key(connection, table)
                order = ", ".join(f'"{name}"' for _, name in key)
                share = share_of(f'"{key[-1][1]}"', PARTS)
                for _ in connection.execute(
                    f"SELECT * FROM main.{table} WHERE {share} ORDER BY {order}",
                    (part,),
                ):
                    pass
        connection.execute("COMMIT")
    return SHARE_ROWS[path, part]


COMPARING: list[float] = []  # CPU seconds of each fast pass spent comparing with the tables


def fast_pass(path: str, part: int) -> int:
    projections = ProjectionSet([StreamsProjection(), *default_projections()]).projections
    replay.CONTEXT.update(machines=Machines(MACHINES), projections=projections)
    compare_rows = tables.compare_rows
    spent = 0.0

    def timed(*args: Any) -> Any:
        nonlocal spent
        started = time.process_time()
        try:
            return compare_rows(*args)
        finally:
            spent += time.process_time() - started

    tables.compare_rows = timed  # type: ignore[assignment]
    try:
        found = replay.replay(path, part, PARTS, [p.name for p in projections])
    finally:
        tables.compare_rows = compare_rows  # type: ignore[assignment]
    assert found.fast and not found.chain_doubted and not found.violations
    COMPARING.append(spent)
    return found.rows


PHASES: dict[str, Callable[[str, int], int]] = {
    "scan": scan,
    "scan+links": scan_and_links,
    "legality": legality,
    "complete_floor": complete_floor,
    "read_model_floor": read_model_floor,
    "read_back": read_back,
    "fast_pass": fast_pass,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="folder for the log, reused")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    path = str(kept_log(args.keep / f"profile-{args.events}", args.events))
    gc.disable()  # as in verify's workers
    medians: dict[str, float] = {}
    for name, phase in PHASES.items():
        seconds, rows = [], 0
        for _ in range(args.runs):
            started = time.process_time()
            rows = phase(path, 0)
            seconds.append(time.process_time() - started)
        median = medians[name] = statistics.median(seconds)
        shown = " ".join(f"{s:.2f}" for s in seconds)
        print(
            f"{name}: {median:.3f} s CPU for {rows} rows ({shown}),"
            f" {median / rows * 1e6:.2f} us per row, two cores at most"
            f" {PARTS * rows / median:,.0f} events/s"
        )
    print(f"fast_pass comparing with the stored tables: {statistics.median(COMPARING):.3f} s CPU")
    floor = medians["complete_floor"]
    print(
        f"verify_vs_complete_floor by these shares: {floor / medians['fast_pass']:.3f};"
        f" at most {floor / (floor + medians['read_back']):.3f} while the stored rows are read"
        " back (complete_floor / (complete_floor + read_back))"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
