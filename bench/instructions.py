"""Instructions per durable append, counted by valgrind's callgrind: ``bench.full_floor``'s
appenders profiled without the noise of the disk and of a shared box.

    python -m bench.instructions [--events N] [--appenders raw floor guarded inlined append]

``bench.full_floor`` times its appenders, and on a 2-core VM the same code moves by a tenth of
its ratio from run to run. Instructions do not move: callgrind counts every instruction each
thread of the process runs in user space (Python, SQLite, OpenSSL, msgspec; not the kernel's
system calls and syncs, which ``bench.full_floor`` times). Each appender runs twice, in a
process of its own, with ``--events`` and three times as many; the difference over the
difference in events is its count per append, with the imports, the open and the close
cancelled out. The first ``--events`` appends create their streams, the rest add to them, as
in ``bench.log.bench_append``.

Prints each appender's instructions per append and its ratio to ``raw``. A profile, not a goal:
it says where a durable append's CPU goes (docs/benchmarks.md, "Instructions per append").
Needs valgrind (Debian's ``valgrind`` package); exits 2 with a message without it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.full_floor import APPENDERS

_CHILD = (
    "import sys\n"
    "from bench.common import Workdir\n"
    "from bench.full_floor import APPENDERS\n"
    "work = Workdir()\n"
    "try:\n"
    "    APPENDERS[sys.argv[1]](work.path(), int(sys.argv[2]), [])\n"
    "finally:\n"
    "    work.close()\n"
)
_TOTALS = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


def counted(name: str, events: int, folder: Path) -> subprocess.Popen[bytes]:
    """A process running ``name``'s appender for ``events`` appends under callgrind."""
    out = folder / f"{name}.{events}.out"
    return subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-c",
            _CHILD,
            name,
            str(events),
        ],
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # the same dict layouts in every run
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def total(name: str, events: int, folder: Path, process: subprocess.Popen[bytes]) -> int:
    """The instructions of a finished ``counted`` process."""
    _, stderr = process.communicate()
    if process.returncode != 0:
        tail = stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"{name} ({events} events) failed under callgrind:\n{tail}")
    found = _TOTALS.search((folder / f"{name}.{events}.out").read_bytes())
    if found is None:
        raise RuntimeError(f"{name} ({events} events): callgrind wrote no totals")
    return int(found[1])


def per_append(names: list[str], events: int) -> dict[str, float]:
    """Each appender's instructions per append, two processes per appender at a time."""
    counts: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="foldline-instructions-") as folder:
        for name in names:
            sizes = (events, 3 * events)
            running = [(size, counted(name, size, Path(folder))) for size in sizes]
            few, many = (total(name, size, Path(folder), p) for size, p in running)
            counts[name] = (many - few) / (sizes[1] - sizes[0])
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--appenders", nargs="+", choices=list(APPENDERS), default=list(APPENDERS))
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("bench.instructions needs valgrind (Debian's valgrind package)", file=sys.stderr)
        return 2
    if args.events < 1:
        parser.error("--events must be 1 or more")
    counts = per_append(args.appenders, args.events)
    for name, count in counts.items():
        print(f"instructions.{name}.per_append: {count:.0f}")
        if "raw" in counts:
            print(f"ratio.instructions.{name}_vs_raw: {count / counts['raw']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
