"""``verify`` against its floors on one large log, in alternating rounds.

    python -m bench.audit_rounds --keep FOLDER [--events N] [--rounds 3]

builds a log of N job events (``bench.ready.build``) into FOLDER once and reuses it. Each round
times, one after the other on both cores, the whole ``verify`` (as ``bench.audit`` calls it),
``bench.audit``'s ``complete_floor`` and its ``read_model_floor``, and prints
``verify_vs_complete_floor``, ``read_model_floor_vs_complete_floor`` and
``verify_vs_read_model_floor`` for the round; then the median of each. On a box others share,
the rounds keep each ratio's two sides minutes apart at most (``bench.run --only audit`` runs
each once, with the diff figures' logs built between them).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.audit import complete_floor, kept_log, read_model_floor
from engine.audit import verify
from engine.domain import MACHINES
from projections import default_projections


def verify_seconds(db: Path) -> float:
    """Seconds for ``verify`` of the log, every read model compared.

    Raises:
        AssertionError: the log does not verify (the figure would be of another path).
    """
    started = time.perf_counter()
    report = verify(db, MACHINES, default_projections())
    seconds = time.perf_counter() - started
    assert report.ok, report.violations[:3]
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="folder for the log, reused")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    db = kept_log(args.keep / f"rounds-{args.events}", args.events)
    ratios: dict[str, list[float]] = {}
    for round_ in range(1, args.rounds + 1):
        v, c, m = verify_seconds(db), complete_floor(db), read_model_floor(db)
        found = {
            "verify_vs_complete_floor": c / v,
            "read_model_floor_vs_complete_floor": c / m,
            "verify_vs_read_model_floor": m / v,
        }
        for name, ratio in found.items():
            ratios.setdefault(name, []).append(ratio)
        shown = ", ".join(f"{name} {ratio:.3f}" for name, ratio in found.items())
        print(
            f"round {round_}: verify {v:.2f} s, complete_floor {c:.2f} s,"
            f" read_model_floor {m:.2f} s; {shown}",
            flush=True,
        )
    for name, values in ratios.items():
        print(f"median {name}: {statistics.median(values):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
