"""The ``foldline`` command line. JSON goes to stdout, messages to stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from engine import EngineError, open_log
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
    log = open_log(path, [], default_projections(), sync=sync)  # type: ignore[arg-type]
    try:
        print(json.dumps({"db": str(path), "schema": LATEST, "head": log.head(), "sync": log.sync}))
    finally:
        log.close()
    print(
        "foldline: the log is open and current; the HTTP server is not implemented yet",
        file=sys.stderr,
    )
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except EngineError as ex:
        print(f"foldline: {ex.code}: {ex}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
