"""``foldline replay LOG --with NEW``: before an upgrade, would the new machine code accept
the recorded history and fold it the same? (``engine.audit.upgrade``; docs/auditing.md)"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from adapters.cli.exits import FOUND, OK
from adapters.settings.declarations import ENVIRONMENT, GROUP, load_declarations
from adapters.settings.log_sources import as_file


def run_replay(args: argparse.Namespace) -> int:
    """Exit 0 when the new code accepts and folds the whole history the same, 1 with the
    first position per machine it would judge otherwise, 2 when unreadable."""
    from engine.audit.upgrade import replay_check  # here: every command builds this parser

    # The new declarations come last, so they replace the installed ones of the same kind.
    declared = load_declarations([*(args.machines or ()), *args.new])
    with as_file(args.db) as path:
        found = replay_check(path, declared.machines, declared.projections)
    output: dict[str, Any] = {
        "db": args.db,
        "with": args.new,
        "events": found.events,
        "ok": found.ok,
        "machines": found.machines,
        "projections": found.projections,
    }
    if found.unchecked:
        output["unchecked_projections"] = found.unchecked
    if found.log:
        output["log"] = [v.__dict__ for v in found.log]
    print(json.dumps(output, indent=2))
    for kind, first in sorted(found.machines.items()):
        print(
            f"foldline: {kind}: the new code first judges otherwise at position"
            f" {first['position']}: {first['finding']}: {first['detail']}",
            file=sys.stderr,
        )
    for name, why in sorted(found.projections.items()):
        print(f"foldline: projection {name}: {why}", file=sys.stderr)
    for v in found.log:
        print(f"foldline: position {v.position}: {v.kind}: {v.detail}", file=sys.stderr)
    if found.ok:
        print(
            f"foldline: the new code accepts all {found.events} events and folds them the same",
            file=sys.stderr,
        )
    return OK if found.ok else FOUND


def add_command(commands: Any) -> None:
    replay = commands.add_parser(
        "replay",
        help="refold a log under new machine code: the first event it would refuse, per machine",
        epilog="example: foldline replay .foldline/foldline.db --with mypkg.machines:MACHINES",
    )
    replay.add_argument("db")
    replay.add_argument(
        "--with",
        dest="new",
        action="append",
        required=True,
        metavar="MODULE:ATTRIBUTE|FILE.py[:ATTRIBUTE]",
        help="the new declarations (machines, projections), as for --machines, or a plugin file",
    )
    replay.add_argument(
        "--machines",
        action="append",
        metavar="MODULE:ATTRIBUTE",
        help=f"machines the log also holds, unchanged; also ${ENVIRONMENT} and the entry"
        f" points of group {GROUP}",
    )
    replay.set_defaults(run=run_replay)
