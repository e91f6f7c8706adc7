"""The commands that read, check and copy a log: ``verify``, ``checkpoint``, ``diff``,
``history``, ``state``, ``export``, ``tail``, ``copy``, ``rebuild`` and ``machines``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from adapters.cli.exits import FOUND, OK
from adapters.settings.declarations import Declarations, load_declarations
from adapters.settings.log_sources import as_file, open_any_reader, reading
from engine import InvalidArgument, Machines, open_log, open_notifier
from engine.audit import (
    UNJUDGED,
    diff,
    export_line,
    judge,
    make_checkpoint,
    state_at,
    verify,
    verify_against,
)
from engine.audit.anchor import encode as encode_checkpoint
from engine.audit.anchor import load as load_checkpoint
from engine.chain import Violation
from engine.clock import format_time, parse_time
from engine.keep.archive import joined


def run_machines(args: argparse.Namespace) -> int:
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
    return OK


def _declarations(args: argparse.Namespace) -> Declarations:
    return load_declarations(args.machines or ())


def _judged(db: str, declared: Declarations, label: str = "") -> list[Violation]:
    """``db``'s events judged by the declarations in force when each was recorded (ADR 0060,
    ``engine.audit.judge``, what ``verify`` replays by): the findings, each printed on stderr
    like ``verify``'s. Streams no declaration names are said once on stderr and not counted:
    these commands read any log."""
    with as_file(db) as copy, joined(copy) as path:  # an archived log: with its segments
        found = judge(path, declared.machines, _progress)
    for v in found:
        line = f"{label}position {v.position}: {v.kind}: {v.detail}"
        print(f"foldline: {'note: ' if v.kind == UNJUDGED else ''}{line}", file=sys.stderr)
    return [v for v in found if v.kind != UNJUDGED]


def _progress(stage: str, done: int, total: int) -> None:
    """A one-line progress report on a terminal; nothing at all when stderr is piped."""
    if sys.stderr.isatty():
        end = "\n" if stage == "projections" else ""
        print(f"\rfoldline: {stage}: {done}/{total} events", end=end, file=sys.stderr, flush=True)


def run_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the log is intact, 1 with the violations listed, 2 when unreadable."""
    if args.since:
        from adapters.cli.since import run_verify_since

        return run_verify_since(args)
    if args.key:
        raise InvalidArgument("--key checks the signature of a --since checkpoint")
    anchor = None
    if args.against:
        try:
            anchor = load_checkpoint(Path(args.against).read_bytes())
        except OSError as ex:
            raise InvalidArgument(f"--against {args.against}: {ex.strerror}") from ex
    declared = _declarations(args)
    with as_file(args.db) as copy, joined(copy) as path:  # an archived log: with its segments
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
    return FOUND if violations else OK


def run_checkpoint(args: argparse.Namespace) -> int:
    _declarations(args)
    if args.key or args.origin:
        from adapters.cli.proofs import signed_checkpoint

        return signed_checkpoint(args)
    with as_file(args.db) as path:
        checkpoint = make_checkpoint(path)
    sys.stdout.buffer.write(encode_checkpoint(checkpoint) + b"\n")
    return OK


def run_diff(args: argparse.Namespace) -> int:
    """Exit 0 when the logs are identical and each keeps its recorded rules, else 1."""
    declared = _declarations(args)
    with as_file(args.a) as a, as_file(args.b) as b:
        result = diff(a, b, args.at)
    judged = {"a": _judged(args.a, declared, "A: ")}
    judged["b"] = judged["a"] if result.identical else _judged(args.b, declared, "B: ")
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
                    "judged": {side: [v.__dict__ for v in found] for side, found in judged.items()},
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
    if not args.json:
        for side, found in judged.items() if not result.identical else [("a", judged["a"])]:
            for v in found:
                print(
                    f"  {side.upper()} breaks its recorded rules: position {v.position}: {v.kind}"
                )
    return OK if result.identical and not judged["a"] else FOUND


def run_history(args: argparse.Namespace) -> int:
    _declarations(args)
    with reading(args.db) as reader:
        for row in reader.stream_rows(args.stream):
            sys.stdout.buffer.write(export_line(row) + b"\n")
    return OK


def run_state(args: argparse.Namespace) -> int:
    """Print the heads; exit 1 when an event up to them breaks the rules in force then."""
    declared = _declarations(args)
    with reading(args.db) as reader:
        time_text = format_time(parse_time(args.time)) if args.time else None
        heads = state_at(reader, args.at, time_text)
    # Only what led to these heads counts: a finding after them does not change them.
    upto = max((head["position"] for head in heads.values()), default=0)
    found = [v for v in _judged(args.db, declared) if v.position <= upto]
    if args.stream:
        heads = {k: v for k, v in heads.items() if k == args.stream}
    print(json.dumps(heads, indent=2, sort_keys=True))
    return FOUND if found else OK


def run_export(args: argparse.Namespace) -> int:
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
    return OK


def run_tail(args: argparse.Namespace) -> int:
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
                return OK
            reader.log.wait_for(after, 1.0)
    except KeyboardInterrupt:
        return OK
    finally:
        if notifier is not None:
            notifier.stop()
        reader.close()


def run_copy(args: argparse.Namespace) -> int:
    """Copy a log between backends with its chain; exit 1 if the copy's chain does not verify."""
    from engine.storage.copy import copy_log

    report = copy_log(args.source, args.target)
    print(json.dumps(report.__dict__, indent=2))
    return OK if report.chain_ok else FOUND


def run_rebuild(args: argparse.Namespace) -> int:
    """Refold every projection, once the log keeps the rules it recorded (else exit 1 and
    write nothing, unless ``--force``)."""
    declared = _declarations(args)
    found = _judged(args.db, declared)
    if found and not args.force:
        print(json.dumps({"rebuilt": False, "violations": [v.__dict__ for v in found]}, indent=2))
        print(
            "foldline: not rebuilt: the log breaks the rules in force when its events were"
            " recorded (foldline verify says all; --force rebuilds anyway)",
            file=sys.stderr,
        )
        return FOUND
    log = open_log(args.db, declared.machines, declared.projections)
    try:
        before = log.content_hash()
        after = log.rebuild()
    finally:
        log.close()
    changed = sorted(name for name in after if before.get(name) != after[name])
    print(json.dumps({"projections": after, "changed": changed}, indent=2))
    return OK
