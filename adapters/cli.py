"""The ``foldline`` command line. JSON goes to stdout, messages to stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from engine import EngineError, Machines
from engine.domain import MACHINES
from engine.schema import LATEST
from projections import open_engine


def _serve(args: argparse.Namespace) -> int:
    """Run the HTTP server on the workspace (blocks until stopped)."""
    from adapters.config import ConfigError, load_config
    from adapters.server import FoldlineServer

    try:
        config = load_config(
            workspace=args.workspace, bind=args.bind, workers=args.workers, threads=args.threads
        )
    except ConfigError as ex:
        print(f"foldline: invalid configuration: {ex}", file=sys.stderr)
        return 2
    if args.db:
        config = replace(config, db=Path(args.db).resolve())
    # Open (create, migrate) the log once before forking, and close it: a bad file is a boot
    # error, and no connection crosses the fork.
    engine = open_engine(config.db, sync=config.sync)  # type: ignore[arg-type]
    head = engine.log.head()
    engine.log.close()
    print(
        json.dumps(
            {
                "db": str(config.db),
                "schema": LATEST,
                "head": head,
                "bind": config.bind,
                "workers": config.workers,
            }
        ),
        flush=True,
    )
    FoldlineServer(config).run()
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
        help="serve the AgentCore runtime contract on the workspace",
        epilog="example: foldline serve --workspace ./my-workspace --bind 127.0.0.1:8080",
    )
    serve.add_argument("--workspace", help="workspace folder (default: $FOLDLINE_WORKSPACE or .)")
    serve.add_argument("--db", help="log file (default: <workspace>/.foldline/foldline.db)")
    serve.add_argument("--bind", help="HOST:PORT (default: $FOLDLINE_BIND or 127.0.0.1:8080)")
    serve.add_argument("--workers", type=int, help="worker processes (default 2)")
    serve.add_argument("--threads", type=int, help="threads per worker (default 32)")
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
