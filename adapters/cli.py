"""The ``foldline`` command line. JSON goes to stdout, messages to stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine import EngineError, Machines, open_log, open_notifier
from engine.audit import diff, export_line, open_audit, state_at, verify
from engine.clock import format_time, parse_time
from engine.domain import MACHINES
from engine.schema import LATEST
from projections import default_projections


def _looks_like_sqlite(path: Path) -> bool:
    with open(path, "rb") as handle:
        header = handle.read(16)
    return header == b"SQLite format 3\x00" or header == b""


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
    # Lazy activation (SPEC §4.2): nothing under the workspace is created or opened here; on
    # AgentCore the volume is mounted at the first invocation, and a log made before that
    # would live on the microVM's own disk. A file already there is checked by its header
    # only, so a wrong --db is still a boot error.
    if config.db.is_file() and not _looks_like_sqlite(config.db):
        print(f"foldline: not_a_log: {config.db} is not a SQLite database", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "db": str(config.db),
                "log": "opened at the first request that needs it",
                "schema": LATEST,
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


def _audit(path: str, writable: bool = False) -> Any:
    return open_audit(path, MACHINES, default_projections(), writable)


def _progress(stage: str, done: int, total: int) -> None:
    """A one-line progress report on a terminal; nothing at all when stderr is piped."""
    if sys.stderr.isatty():
        end = "\n" if stage == "projections" else ""
        print(f"\rfoldline: {stage}: {done}/{total} events", end=end, file=sys.stderr, flush=True)


def _verify(args: argparse.Namespace) -> int:
    """Exit 0 when the log is intact, 1 with the violations listed, 2 when unreadable."""
    with _audit(args.db, writable=True) as log:  # the projection check refolds a copy
        violations = verify(log, _progress)
        head = log.head()
    print(
        json.dumps(
            {
                "db": args.db,
                "events": head,
                "ok": not violations,
                "violations": [v.__dict__ for v in violations],
            },
            indent=2,
        )
    )
    for v in violations:
        print(f"foldline: position {v.position}: {v.kind}: {v.detail}", file=sys.stderr)
    return 1 if violations else 0


def _diff(args: argparse.Namespace) -> int:
    with _audit(args.a) as a, _audit(args.b) as b:
        result = diff(a, b, args.at)
        heads = (a.head(), b.head())
    if args.json:
        print(
            json.dumps(
                {
                    "identical": result.identical,
                    "common_prefix": result.common_prefix,
                    "heads": {"a": heads[0], "b": heads[1]},
                    "only_a": result.only_a,
                    "only_b": result.only_b,
                    "changed": result.changed,
                    "entities": result.entities,
                },
                indent=2,
            )
        )
    elif result.identical:
        print(f"identical: {heads[0]} events")
    else:
        print(
            f"the logs part after position {result.common_prefix} "
            f"(A has {heads[0]} events, B has {heads[1]})"
        )
        for title, streams in (
            ("only in A", result.only_a),
            ("only in B", result.only_b),
            ("changed", result.changed),
        ):
            for stream, versions in streams.items():
                print(f"  {title}: {stream} versions {versions}")
        for stream, sides in result.entities.items():
            a_side = sides["a"] and f"{sides['a']['state']} v{sides['a']['version']}"
            b_side = sides["b"] and f"{sides['b']['state']} v{sides['b']['version']}"
            print(f"  {stream}: A {a_side or '(none)'} | B {b_side or '(none)'}")
    return 0 if result.identical else 1


def _history(args: argparse.Namespace) -> int:
    with _audit(args.db) as log:
        for row in log.iter_rows():
            if row[1] == args.stream:
                sys.stdout.buffer.write(export_line(row) + b"\n")
    return 0


def _state(args: argparse.Namespace) -> int:
    with _audit(args.db) as log:
        time_text = format_time(parse_time(args.time)) if args.time else None
        heads = state_at(log, args.at, time_text)
    if args.stream:
        heads = {k: v for k, v in heads.items() if k == args.stream}
    print(json.dumps(heads, indent=2, sort_keys=True))
    return 0


def _export(args: argparse.Namespace) -> int:
    with _audit(args.db) as log:
        total = log.head()
        for row in log.iter_rows(max(0, args.start - 1)):
            if args.end is not None and row[0] > args.end:
                break
            sys.stdout.buffer.write(export_line(row) + b"\n")
            if row[0] % 100_000 == 0:
                _progress("export", row[0], total)
    return 0


def _tail(args: argparse.Namespace) -> int:
    log = open_log(args.db, MACHINES, default_projections())
    notifier = open_notifier(log) if args.follow else None
    try:
        after = max(0, log.head() - args.lines)
        while True:
            for row in log.iter_rows(after):
                sys.stdout.buffer.write(export_line(row) + b"\n")
                after = row[0]
            sys.stdout.flush()
            if notifier is None:
                return 0
            log.wait_for(after, 1.0)
    except KeyboardInterrupt:
        return 0
    finally:
        if notifier is not None:
            notifier.stop()
        log.close()


def _rebuild(args: argparse.Namespace) -> int:
    log = open_log(args.db, MACHINES, default_projections())
    try:
        before = log.content_hash()
        after = log.rebuild()
    finally:
        log.close()
    changed = sorted(name for name in after if before.get(name) != after[name])
    print(json.dumps({"projections": after, "changed": changed}, indent=2))
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

    def command(name: str, help_text: str, example: str, run: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, epilog=f"example: {example}")
        sub.set_defaults(run=run)
        return sub

    verify_cmd = command(
        "verify",
        "check a log: chain, versions, legality, projections",
        "foldline verify .foldline/foldline.db",
        _verify,
    )
    verify_cmd.add_argument("db")
    diff_cmd = command(
        "diff",
        "tell two logs apart: first divergence, streams, entities",
        "foldline diff backup.db live.db --json",
        _diff,
    )
    diff_cmd.add_argument("a")
    diff_cmd.add_argument("b")
    diff_cmd.add_argument("--at", type=int, help="compare entity states at this position")
    diff_cmd.add_argument("--json", action="store_true", help="machine-readable output")
    history_cmd = command(
        "history",
        "one stream's events as JSON lines",
        "foldline history .foldline/foldline.db job:job_18c",
        _history,
    )
    history_cmd.add_argument("db")
    history_cmd.add_argument("stream")
    state_cmd = command(
        "state",
        "every stream's head at a position or a time",
        "foldline state .foldline/foldline.db --time 2026-11-30T06:00:00Z",
        _state,
    )
    state_cmd.add_argument("db")
    when = state_cmd.add_mutually_exclusive_group()
    when.add_argument("--at", type=int, help="a log position (inclusive)")
    when.add_argument("--time", help="an ISO-8601 time (inclusive)")
    state_cmd.add_argument("--stream", help="only this stream")
    export_cmd = command(
        "export",
        "canonical JSON lines, one per event, stable key order",
        "foldline export .foldline/foldline.db --from 1 --to 1000",
        _export,
    )
    export_cmd.add_argument("db")
    export_cmd.add_argument("--from", dest="start", type=int, default=1)
    export_cmd.add_argument("--to", dest="end", type=int)
    tail_cmd = command(
        "tail",
        "the last events, and with --follow the new ones as they land",
        "foldline tail .foldline/foldline.db --follow",
        _tail,
    )
    tail_cmd.add_argument("db")
    tail_cmd.add_argument("--lines", type=int, default=10)
    tail_cmd.add_argument("--follow", action="store_true")
    rebuild_cmd = command(
        "rebuild",
        "drop and refold every projection (writes the file)",
        "foldline rebuild .foldline/foldline.db",
        _rebuild,
    )
    rebuild_cmd.add_argument("db")
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
