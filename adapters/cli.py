"""The ``foldline`` command line. JSON goes to stdout, messages to stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from engine import EngineError, Machines, open_log
from engine.domain import MACHINES
from engine.schema import LATEST
from projections import default_projections

DB_RELATIVE = Path(".foldline") / "foldline.db"


def _db_path(workspace: str | None, db: str | None) -> Path:
    if db:
        return Path(db)
    root = Path(workspace or os.environ.get("FOLDLINE_WORKSPACE") or ".")
    return Path(os.environ.get("FOLDLINE_DB") or root / DB_RELATIVE)


def _serve(args: argparse.Namespace) -> int:
    """Until the HTTP surface lands: open (create, migrate) the log and print its head."""
    path = _db_path(args.workspace, args.db)
    sync = os.environ.get("FOLDLINE_SYNC", "full")
    log = open_log(path, MACHINES, default_projections(), sync=sync)  # type: ignore[arg-type]
    try:
        print(json.dumps({"db": str(path), "schema": LATEST, "head": log.head(), "sync": log.sync}))
    finally:
        log.close()
    print(
        "foldline: the log is open and current; the HTTP server is not implemented yet",
        file=sys.stderr,
    )
    return 0


def _machines(args: argparse.Namespace) -> int:
    """Print the built-in machines as JSON, Mermaid, or a readable summary."""
    machines = Machines(MACHINES).by_kind.values()
    if args.json:
        print(json.dumps([m.to_json() for m in machines], indent=2))
    elif args.mermaid:
        print("\n".join(f"%% {m.kind}\n{m.to_mermaid()}" for m in machines), end="")
    else:
        for machine in machines:
            spec = machine.to_json()
            print(f"{spec['kind']}: {spec['description']}")
            print(f"  states:   {', '.join(spec['states'])}")
            print(f"  terminal: {', '.join(spec['terminal']) or '-'}")
            for t in spec["transitions"]:
                sources = ", ".join(t["sources"]) or "(new stream)"
                dest = t["dest"] or "(unchanged)"
                guard = f" [{t['guard']}]" if t["guard"] else ""
                print(f"  {t['event_type']:24} {sources} -> {dest}{guard}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="foldline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="open the workspace's log (HTTP server: not implemented yet)",
        epilog="example: foldline serve --workspace ./my-workspace",
    )
    serve.add_argument("--workspace", help="workspace folder (default: $FOLDLINE_WORKSPACE or .)")
    serve.add_argument("--db", help="log file (default: <workspace>/.foldline/foldline.db)")
    serve.set_defaults(run=_serve)
    machines = commands.add_parser(
        "machines",
        help="print the lease, session, job and task machines",
        epilog="example: foldline machines --mermaid > machines.mmd",
    )
    form = machines.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the declarations as JSON")
    form.add_argument("--mermaid", action="store_true", help="Mermaid state diagrams")
    machines.set_defaults(run=_machines)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except EngineError as ex:
        print(f"foldline: {ex.code}: {ex}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (head, less) went away: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
