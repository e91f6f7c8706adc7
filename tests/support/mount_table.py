"""A launcher that runs ``foldline`` in this process with the mount table read from a file,
for a server test whose shared-volume mode a crafted table decides (ADR 0042): there is no
NFS to mount here, and ``/proc/self/mountinfo`` cannot be bound over (each process's view of
``/proc/self`` is its own). gunicorn's workers fork from this process and read it too.

    python -m tests.support.mount_table TABLE PYTHON -m adapters.cli ARGS...

The tail is the command ``tests.support.server.serve`` builds after its ``prefix``.
"""

from __future__ import annotations

import sys

from adapters.cli.main import main
from adapters.system import mounts


def run(argv: list[str]) -> int:
    table, _python, flag, module, *args = argv
    if (flag, module) != ("-m", "adapters.cli"):
        raise SystemExit(f"usage: {__doc__}")
    mounts.MOUNTINFO = table
    return main(args)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
