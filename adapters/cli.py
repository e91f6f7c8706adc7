"""The ``foldline`` command line. JSON goes to stdout, messages to stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapters.declarations import ENVIRONMENT, GROUP, Declarations, load_declarations
from adapters.log_sources import as_file, open_any_reader, reading
from engine import EngineError, InvalidArgument, Machines, open_log, open_notifier
from engine.audit import (
    diff,
    export_line,
    make_checkpoint,
    state_at,
    verify,
    verify_against,
)
from engine.audit.anchor import encode as encode_checkpoint
from engine.audit.anchor import load as load_checkpoint
from engine.clock import format_time, parse_time
from engine.storage import check_target, parse_target
from engine.storage.sqlite.schema import LATEST

if TYPE_CHECKING:
    from adapters.config import ServerConfig


def _looks_like_sqlite(path: Path) -> bool:
    with open(path, "rb") as handle:
        header = handle.read(16)
    return header == b"SQLite format 3\x00" or header == b""


def _shown(url: str) -> str:
    """The URL without its password; a boot error without the extra or with a bad schema."""
    return check_target(url).shown  # checks the URL, connects to nothing


def _server_config(args: argparse.Namespace, **flags: Any) -> ServerConfig | None:
    """The configuration ``serve`` runs with (environment, then flags); None after printing a
    one-line error."""
    from adapters.config import ConfigError, check_places, load_config

    try:
        config = load_config(workspace=args.workspace, **flags)
    except ConfigError as ex:
        print(f"foldline: invalid configuration: {ex}", file=sys.stderr)
        return None
    if args.db and parse_target(args.db).remote:
        config = replace(config, db_url=args.db)
    elif args.db:
        config = replace(config, db=Path(args.db).resolve(), db_url=None)
    try:
        check_places(config)
    except ConfigError as ex:
        print(f"foldline: invalid configuration: {ex}", file=sys.stderr)
        return None
    return config


def _serve(args: argparse.Namespace) -> int:
    """Run the HTTP server on the workspace (blocks until stopped)."""
    from adapters import sandbox
    from adapters.config import ConfigError
    from adapters.server import FoldlineServer

    config = _server_config(args, bind=args.bind, workers=args.workers, threads=args.threads)
    if config is None:
        return 2
    # Lazy activation (SPEC §4.2): nothing under the workspace is created or opened here; on
    # AgentCore the volume is mounted at the first invocation, and a log made before that
    # would live on the microVM's own disk. A file already there is checked by its header
    # only, so a wrong --db is still a boot error.
    if config.db_url is None and config.db.is_file() and not _looks_like_sqlite(config.db):
        print(f"foldline: not_a_log: {config.db} is not a SQLite database", file=sys.stderr)
        return 2
    config = replace(config, new_log=args.new_log)
    jail = sandbox.for_server(config)
    try:
        if jail is not None:  # runs that could not be isolated are never started
            config = replace(config, run_isolation=sandbox.check(jail, config.run_isolation))
            jail = sandbox.for_server(config)
    except ConfigError as ex:
        print(f"foldline: invalid configuration: {ex}", file=sys.stderr)
        return 2
    if config.run_user is not None and config.run_user.is_root:
        print(
            "foldline: warning: FOLDLINE_RUN_USER=root: runs execute as root and can reach"
            " the log and the operator's token",
            file=sys.stderr,
        )
    print(
        json.dumps(
            {
                "db": _shown(config.db_url) if config.db_url else str(config.db),
                "log": "opened at the first request that needs it",
                "schema": LATEST,
                "bind": config.bind,
                "workers": config.workers,
                "runs_as": f"{jail.user.name} ({jail.isolation})" if jail else "the server's user",
                "state_dir": str(config.state_dir),
                # Where the operator token is (never the token itself): made at first activation.
                "operator_token": "FOLDLINE_TOKEN"
                if config.token is not None
                else str(config.operator_token_file),
            }
        ),
        flush=True,
    )
    FoldlineServer(config).run()
    return 0


def _token(args: argparse.Namespace) -> int:
    """Print the operator token file's path and token, or with ``--rotate`` replace it first
    (running workers pick the new one up at their next request, no restart)."""
    from adapters import operator_token

    config = _server_config(args)
    if config is None:
        return 2
    if config.token is not None:
        print(
            "foldline: FOLDLINE_TOKEN is set: it is the operator token and no file is used"
            " (rotate it by restarting the server with a new value)",
            file=sys.stderr,
        )
        return 2
    path = config.operator_token_file
    if not path.is_file():
        print(
            f"foldline: no operator token at {path} yet: the server makes it at its first"
            " activation (the first request that opens the log)",
            file=sys.stderr,
        )
        return 2
    token = operator_token.rotate(path) if args.rotate else path.read_text().strip()
    print(json.dumps({"file": str(path), "token": token}))
    return 0


def _console(args: argparse.Namespace) -> int:
    """Serve the console read-only over a log file: no lease, no runner, no writes."""
    from adapters.config import ConfigError, _bind
    from adapters.console_server import ConsoleServer, check_log, check_loopback

    try:
        bind = check_loopback(_bind(args.bind))
    except ConfigError as ex:
        print(f"foldline: {ex}", file=sys.stderr)
        return 2
    remote = parse_target(args.db).remote
    db: Path | str = args.db if remote else Path(args.db).resolve()
    head = check_log(db)
    shown = _shown(args.db) if remote else str(db)
    print(json.dumps({"db": shown, "head": head, "bind": bind, "read_only": True}), flush=True)
    ConsoleServer(db, bind).run()
    return 0


def _machines(args: argparse.Namespace) -> int:
    """Print the built-in machines as JSON, Mermaid, or a readable summary."""
    machines = Machines(load_declarations(args.machines or ()).machines).by_kind.values()
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


def _declarations(args: argparse.Namespace) -> Declarations:
    return load_declarations(args.machines or ())


def _progress(stage: str, done: int, total: int) -> None:
    """A one-line progress report on a terminal; nothing at all when stderr is piped."""
    if sys.stderr.isatty():
        end = "\n" if stage == "projections" else ""
        print(f"\rfoldline: {stage}: {done}/{total} events", end=end, file=sys.stderr, flush=True)


def _verify(args: argparse.Namespace) -> int:
    """Exit 0 when the log is intact, 1 with the violations listed, 2 when unreadable."""
    anchor = None
    if args.against:
        try:
            anchor = load_checkpoint(Path(args.against).read_bytes())
        except OSError as ex:
            raise InvalidArgument(f"--against {args.against}: {ex.strerror}") from ex
    declared = _declarations(args)
    with as_file(args.db) as path:
        report = verify(path, declared.machines, declared.projections, _progress)
        violations = list(report.violations)
        extends = None
        if anchor is not None:
            refused = verify_against(path, anchor, violations)
            extends = refused is None
            if refused is not None:
                violations.append(refused)
    output: dict[str, Any] = {
        "db": args.db,
        "events": report.events,
        "ok": not violations,
        "violations": [v.__dict__ for v in violations],
    }
    if report.unchecked:
        output["unchecked_projections"] = report.unchecked
    if anchor is not None:
        output["extends_checkpoint"] = extends
    print(json.dumps(output, indent=2))
    for v in violations:
        print(f"foldline: position {v.position}: {v.kind}: {v.detail}", file=sys.stderr)
    if anchor is not None and extends:
        print(
            f"foldline: the log extends the checkpoint at position {anchor.position}"
            f" ({anchor.hash[:16]}...) and verifies after it",
            file=sys.stderr,
        )
    return 1 if violations else 0


def _checkpoint(args: argparse.Namespace) -> int:
    _declarations(args)
    with as_file(args.db) as path:
        checkpoint = make_checkpoint(path)
    sys.stdout.buffer.write(encode_checkpoint(checkpoint) + b"\n")
    return 0


def _diff(args: argparse.Namespace) -> int:
    _declarations(args)
    with as_file(args.a) as a, as_file(args.b) as b:
        result = diff(a, b, args.at)
    heads = (result.heads["a"], result.heads["b"])
    chain = {side: [v.__dict__ for v in found] for side, found in result.chain.items()}
    if args.json:
        print(
            json.dumps(
                {
                    "identical": result.identical,
                    "common_prefix": result.common_prefix,
                    "heads": result.heads,
                    "only_a": result.only_a,
                    "only_b": result.only_b,
                    "changed": result.changed,
                    "moved": result.moved,
                    "entities": result.entities,
                    "chain": chain,
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
            ("moved", result.moved),
        ):
            for stream, versions in streams.items():
                print(f"  {title}: {stream} versions {versions}")
        for stream, sides in result.entities.items():
            a_side = sides["a"] and f"{sides['a']['state']} v{sides['a']['version']}"
            b_side = sides["b"] and f"{sides['b']['state']} v{sides['b']['version']}"
            print(f"  {stream}: A {a_side or '(none)'} | B {b_side or '(none)'}")
        for side, found in result.chain.items():
            for v in found:
                print(f"  {side.upper()}'s chain does not verify: position {v.position}: {v.kind}")
    return 0 if result.identical else 1


def _history(args: argparse.Namespace) -> int:
    _declarations(args)
    with reading(args.db) as reader:
        for row in reader.stream_rows(args.stream):
            sys.stdout.buffer.write(export_line(row) + b"\n")
    return 0


def _state(args: argparse.Namespace) -> int:
    _declarations(args)
    with reading(args.db) as reader:
        time_text = format_time(parse_time(args.time)) if args.time else None
        heads = state_at(reader, args.at, time_text)
    if args.stream:
        heads = {k: v for k, v in heads.items() if k == args.stream}
    print(json.dumps(heads, indent=2, sort_keys=True))
    return 0


def _export(args: argparse.Namespace) -> int:
    _declarations(args)
    with reading(args.db) as reader:
        total = reader.head()
        write = sys.stdout.buffer.write
        for row in reader.iter_rows(max(0, args.start - 1)):
            if args.end is not None and row[0] > args.end:
                break
            write(export_line(row) + b"\n")
            if row[0] % 100_000 == 0:
                _progress("export", row[0], total)
    return 0


def _tail(args: argparse.Namespace) -> int:
    _declarations(args)
    reader = open_any_reader(args.db)
    notifier = open_notifier(reader.log) if args.follow else None
    try:
        after = max(0, reader.head() - args.lines)
        while True:
            for row in reader.iter_rows(after):
                sys.stdout.buffer.write(export_line(row) + b"\n")
                after = row[0]
            sys.stdout.flush()
            if notifier is None:
                return 0
            reader.log.wait_for(after, 1.0)
    except KeyboardInterrupt:
        return 0
    finally:
        if notifier is not None:
            notifier.stop()
        reader.close()


def _copy(args: argparse.Namespace) -> int:
    """Copy a log between backends with its chain; exit 1 if the copy's chain does not verify."""
    from engine.log_copy import copy_log

    report = copy_log(args.source, args.target)
    print(json.dumps(report.__dict__, indent=2))
    return 0 if report.chain_ok else 1


def _rebuild(args: argparse.Namespace) -> int:
    declared = _declarations(args)
    log = open_log(args.db, declared.machines, declared.projections)
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
    serve.add_argument(
        "--db",
        help="log file or postgresql://...?schema=S (default: <workspace>/.foldline/foldline.db)",
    )
    serve.add_argument("--bind", help="HOST:PORT (default: $FOLDLINE_BIND or 127.0.0.1:8080)")
    serve.add_argument("--workers", type=int, help="worker processes (default 2)")
    serve.add_argument("--threads", type=int, help="threads per worker (default 32)")
    serve.add_argument(
        "--new-log",
        action="store_true",
        help="start even though the log does not extend its anchor (recorded as lease.new_log)",
    )
    serve.set_defaults(run=_serve)
    token = commands.add_parser(
        "token",
        help="print the operator token the server made (or --rotate it)",
        epilog="example: foldline token --workspace var/workspace --rotate",
    )
    token.add_argument("--workspace", help="workspace folder (default: $FOLDLINE_WORKSPACE or .)")
    token.add_argument("--db", help="the log, as for serve (its token file is beside it)")
    token.add_argument(
        "--rotate", action="store_true", help="replace it with a new one (no restart needed)"
    )
    token.set_defaults(run=_token)
    machines = commands.add_parser(
        "machines",
        help="print the lease, session, job and task machines",
        epilog="example: foldline machines --mermaid > machines.mmd",
    )
    form = machines.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the declarations as JSON")
    form.add_argument("--mermaid", action="store_true", help="Mermaid state diagrams")
    machines.add_argument(
        "--machines", action="append", metavar="MODULE:ATTRIBUTE", help="machines to add"
    )
    machines.set_defaults(run=_machines)

    def command(name: str, help_text: str, example: str, run: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, epilog=f"example: {example}")
        sub.set_defaults(run=run)
        sub.add_argument(
            "--machines",
            action="append",
            metavar="MODULE:ATTRIBUTE",
            help=f"machines (and projections) beyond the built-in ones; also ${ENVIRONMENT}"
            f" and the entry points of group {GROUP}",
        )
        return sub

    verify_cmd = command(
        "verify",
        "check a log: chain, versions, legality, projections",
        "foldline verify .foldline/foldline.db",
        _verify,
    )
    verify_cmd.add_argument("db")
    verify_cmd.add_argument(
        "--against", metavar="FILE", help="a checkpoint the log must still extend"
    )
    checkpoint_cmd = command(
        "checkpoint",
        "print a trust anchor (position, hash, time, streams) to keep outside the log",
        "foldline checkpoint .foldline/foldline.db > anchor.json",
        _checkpoint,
    )
    checkpoint_cmd.add_argument("db")
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
    copy_cmd = command(
        "copy",
        "copy a log between backends (SQLite file, postgresql:// URL) with its chain",
        "foldline copy .foldline/foldline.db 'postgresql://host/db?schema=ws1'",
        _copy,
    )
    copy_cmd.add_argument("source")
    copy_cmd.add_argument("target")
    rebuild_cmd = command(
        "rebuild",
        "drop and refold every projection (writes the file)",
        "foldline rebuild .foldline/foldline.db",
        _rebuild,
    )
    rebuild_cmd.add_argument("db")
    console_cmd = command(
        "console",
        "serve the operator console read-only over a log (no lease, no writes)",
        "foldline console .foldline/foldline.db --bind 127.0.0.1:8081",
        _console,
    )
    console_cmd.add_argument("db")
    console_cmd.add_argument("--bind", default="127.0.0.1:8081", help="HOST:PORT")
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
