"""The commands that keep a log for years: ``backup`` (a continuous, verified replica) and
``restore`` (a working log from it), ``archive`` (old events into sealed segments) and
``retain`` (ended entities' read-model rows retired by policy). ADRs 0062 and 0063.

JSON goes to stdout (``backup`` prints one line per shipped batch), messages to stderr. A
check that fails (a source whose history no longer extends the replica's) exits 1.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from adapters.cli.exits import FOUND, OK
from adapters.cli.proofs import read_text
from adapters.settings.declarations import load_declarations
from engine import open_log
from engine.errors import ChainBroken, InvalidArgument
from engine.keep.archive import archive, join_into
from projections.queries.retired import POLICIES

# What one command alone needs (shipping, restoring, retiring, reading a signed checkpoint) is
# imported in its ``run_*``: every ``foldline`` command builds this parser, and pays at its
# start for each module the parser's modules import.


def run_backup(args: argparse.Namespace) -> int:
    """Ship new events to the replica; with ``--follow`` keep shipping until SIGTERM/SIGINT."""
    from engine.keep.replica import Shipped, follow

    stop = threading.Event()
    if args.follow:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())

    def report(shipped: Shipped) -> None:
        print(json.dumps(shipped.to_json()), flush=True)

    try:
        size = follow(
            args.db,
            args.dest,
            keep_following=lambda: args.follow and not stop.is_set(),
            report=report,
            interval=args.interval,
            limit=args.batch,
        )
    except ChainBroken as ex:
        print(f"foldline: backup refused: {ex}", file=sys.stderr)
        return FOUND
    print(f"foldline: the replica holds events 1..{size}", file=sys.stderr)
    return OK


def run_restore(args: argparse.Namespace) -> int:
    """Write the replica's events up to the bound into a new log, then fold its read models."""
    from engine.keep.restore import restore

    declared = load_declarations(args.machines or ())
    try:
        done = restore(args.replica, args.db, args.to_position, args.to_time)
    except ChainBroken as ex:
        print(f"foldline: restore refused: {ex}", file=sys.stderr)
        return FOUND
    open_log(args.db, declared.machines, declared.projections).close()  # folds the read models
    output: dict[str, Any] = {
        "replica": done.replica,
        "db": done.log,
        "events": done.events,
        "commands": done.commands,
        "recorded_at": done.recorded_at,
        "checked_against": {"size": done.checked_size, "root": done.checked_root},
    }
    print(json.dumps(output, indent=2))
    print(
        f"foldline: restored events 1..{done.events}; check it: foldline verify {args.db}",
        file=sys.stderr,
    )
    return OK


def add_commands(commands: Any) -> None:
    """Register ``backup`` and ``restore``."""

    def machines(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--machines",
            action="append",
            metavar="MODULE:ATTRIBUTE",
            help="machines (and projections) beyond the built-in ones",
        )

    backup = commands.add_parser(
        "backup",
        help="ship new events to a replica, each batch proved consistent with it (--follow)",
        epilog="example: foldline backup .foldline/foldline.db /mnt/efs/replica --follow",
    )
    backup.add_argument("db", help="the log (a SQLite file)")
    backup.add_argument("dest", help="the replica's directory (or a .db file)")
    backup.add_argument("--follow", action="store_true", help="keep shipping until stopped")
    backup.add_argument(
        "--interval", type=float, default=0.2, help="seconds between polls when caught up"
    )
    backup.add_argument("--batch", type=int, default=5000, help="events per shipped batch")
    backup.set_defaults(run=run_backup)
    restore_cmd = commands.add_parser(
        "restore",
        help="make a working log from a replica, to a position or a time",
        epilog="example: foldline restore /mnt/efs/replica restored.db --to-time 2026-11-30T06:00Z",
    )
    restore_cmd.add_argument("replica", help="the replica's directory (or its .db file)")
    restore_cmd.add_argument("db", help="the new log to write (must not exist)")
    bound = restore_cmd.add_mutually_exclusive_group()
    bound.add_argument("--to-position", type=int, help="the last position to restore")
    bound.add_argument("--to-time", help="restore the events recorded at or before this time")
    machines(restore_cmd)
    restore_cmd.set_defaults(run=run_restore)
    add_archive_command(commands)
    add_retain_command(commands)


def run_archive(args: argparse.Namespace) -> int:
    """Move the events before a checkpoint into a sealed segment, or (``--join``) write the
    live log and its segments back into one whole log."""
    if args.join:
        events = join_into(args.db, args.join)
        print(json.dumps({"db": args.db, "whole": args.join, "events": events}, indent=2))
        return OK
    if not args.before:
        raise InvalidArgument("archive needs --before CHECKPOINT (or --join WHOLE.db)")
    from adapters.cli.since import read_checkpoint

    head, signature = read_checkpoint(args.before, args.key)
    if head is None:
        print(f"foldline: archive refused: {signature}", file=sys.stderr)
        return FOUND
    text = read_text(args.before, "--before")
    try:
        done = archive(args.db, head, text)
    except ChainBroken as ex:
        print(f"foldline: archive refused: {ex}", file=sys.stderr)
        return FOUND
    output = {
        "db": done.db,
        "segment": done.segment,
        "archived": {"first": done.first, "last": done.last},
        "live_from": done.cut + 1,
        "checkpoint": {"size": head.size, "signature": signature},
        "commands_kept": done.commands,
        "bytes": {
            "before": done.bytes_before,
            "after": done.bytes_after,
            "segment": done.segment_bytes,
        },
    }
    print(json.dumps(output, indent=2))
    print(
        f"foldline: archived events {done.first}..{done.last} into {done.segment}"
        f" ({done.segment_bytes} bytes); the log went from {done.bytes_before} to"
        f" {done.bytes_after} bytes and holds events from {done.cut + 1}",
        file=sys.stderr,
    )
    return OK


def add_archive_command(commands: Any) -> None:
    """Register ``archive``."""
    sub = commands.add_parser(
        "archive",
        help="move the events a signed checkpoint covers into a sealed, compressed segment",
        epilog="example: foldline archive .foldline/foldline.db --before 2026-11.checkpoint"
        " --key prod.vkey",
    )
    sub.add_argument("db", help="the log (a SQLite file)")
    what = sub.add_mutually_exclusive_group()
    what.add_argument("--before", metavar="CHECKPOINT", help="a tlog-checkpoint of the log")
    what.add_argument("--join", metavar="WHOLE", help="write the log and its segments whole")
    sub.add_argument(
        "--key", metavar="VERIFIER_KEY", help="the key that must sign the checkpoint (or a file)"
    )
    sub.set_defaults(run=run_archive)


def run_retain(args: argparse.Namespace) -> int:
    """List (``--dry-run``) or retire the rows of entities that ended before each policy's
    age, one machine per ``--<plural>-older-than`` (``POLICIES``)."""
    from projections.retention import retire

    ages = {
        kind: age
        for kind, policy in POLICIES.items()
        if (age := getattr(args, f"{policy.plural}_older_than")) is not None
    }
    if not ages:
        flags = ", ".join(f"--{p.plural}-older-than" for p in POLICIES.values())
        raise InvalidArgument(f"say what to retire: one or more of {flags}")
    declared = load_declarations(args.machines or ())
    log = open_log(args.db, declared.machines, declared.projections)
    try:
        done = retire(log, ages, dry_run=args.dry_run, limit=args.limit)
    finally:
        log.close()
    output: dict[str, Any] = {"db": args.db, "dry_run": args.dry_run, "policies": {}}
    for kind in done:
        policy = POLICIES[kind.kind]
        output["policies"][kind.kind] = {"policy": kind.policy, "ended_before": kind.ended_before}
        output[policy.plural] = [
            {
                f"{kind.kind}_id": e.entity_id,
                "state": e.state,
                "ended_at": e.ended_at,
                "command_id": e.command_id,
            }
            for e in kind.entities
        ]
        if kind.retired:
            output.setdefault("positions", {})[kind.kind] = {
                "first": kind.first_position,
                "last": kind.last_position,
            }
    print(json.dumps(output, indent=2))
    verb = "would retire" if args.dry_run else "retired"
    for kind in done:
        plural = POLICIES[kind.kind].plural
        print(
            f"foldline: {verb} the rows of {len(kind.entities)} {plural} ({kind.policy})",
            file=sys.stderr,
        )
    return OK


def add_retain_command(commands: Any) -> None:
    """Register ``retain``: one ``--<plural>-older-than AGE`` per machine a policy covers."""
    sub = commands.add_parser(
        "retain",
        help="retire the read-model rows of jobs, tasks, push deliveries and sessions that ended"
        " long ago (recorded as events)",
        epilog="example: foldline retain .foldline/foldline.db --jobs-older-than 30d"
        " --sessions-older-than 90d --dry-run",
    )
    sub.add_argument("db", help="the log")
    for policy in POLICIES.values():
        sub.add_argument(
            f"--{policy.plural}-older-than",
            metavar="AGE",
            help=f"retire ended {policy.plural} whose row last changed more than AGE ago"
            " (30d, 12h, 90m)",
        )
    sub.add_argument("--dry-run", action="store_true", help="list what would go; write nothing")
    sub.add_argument("--limit", type=int, default=100_000, help="at most this many per machine")
    sub.add_argument(
        "--machines", action="append", metavar="MODULE:ATTRIBUTE",
        help="machines (and projections) beyond the built-in ones",
    )  # fmt: skip
    sub.set_defaults(run=run_retain)
