"""``foldline verify DB --since CHECKPOINT [--key VERIFIER_KEY]``: prove the log extends a
tlog-checkpoint, then verify only the events after it (``engine.audit.since``).

Exit 0 when it does and the tail verifies, 1 with what failed (a checkpoint that does not
verify under ``--key`` is one such finding, as in ``verify-proof``), 2 when it cannot run.
Without ``--key`` the checkpoint's body is trusted as given, and the output says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from adapters.cli.exits import FOUND, OK
from adapters.cli.proofs import read_text
from adapters.cli.verify_proof import verifier_key
from adapters.settings.declarations import load_declarations
from adapters.settings.log_sources import as_file
from engine.audit.note import TreeHead, open_note, parse_checkpoint
from engine.audit.since import verify_since
from engine.errors import InvalidArgument
from engine.keep.archive import joined


def read_checkpoint(path: str, key: str | None) -> tuple[TreeHead | None, str]:
    """The checkpoint in ``path`` and who vouches for it; None with the reason when its
    signature does not verify under ``key``.

    Raises:
        InvalidArgument: the file or the key cannot be read, or the checkpoint is malformed.
    """
    text = read_text(path, "--since")
    if key is not None:
        verifier = verifier_key(key)  # a malformed key: exit 2
        try:
            body = open_note(text, verifier)
        except InvalidArgument as ex:
            return None, f"--since {path}: {ex}"
        return _parsed(body, path), f"signed by {verifier.name}"
    body, blank, _ = text.rpartition("\n\n")  # a signed note: its text, unchecked
    return _parsed(body + "\n" if blank else text, path), "not checked (no --key): trusted as given"


def _parsed(body: str, path: str) -> TreeHead:
    try:
        return parse_checkpoint(body)
    except InvalidArgument as ex:
        raise InvalidArgument(f"--since {path}: {ex}") from ex


def run_verify_since(args: argparse.Namespace) -> int:
    head, signature = read_checkpoint(args.since, args.key)
    if head is None:
        print(json.dumps({"db": args.db, "ok": False, "checkpoint": {"signature": signature}}))
        print(f"foldline: checkpoint: the signature does not verify: {signature}", file=sys.stderr)
        return FOUND
    declared = load_declarations(args.machines or ())
    with as_file(args.db) as copy, joined(copy) as path:  # an archived log: with its segments
        report = verify_since(path, head, declared.machines, declared.projections)
    m, n = report.size, report.events
    output: dict[str, Any] = {
        "db": args.db,
        "events": n,
        "since": m,
        "ok": report.ok,
        "checkpoint": {
            "origin": head.origin,
            "size": m,
            "signature": signature,
            "consistent": report.consistent,
        },
        "verified": {"first": m + 1, "last": n, "streams": report.streams}
        if report.consistent
        else None,
        "violations": [v.__dict__ for v in report.violations],
    }
    if report.unchecked:
        output["unchecked_projections"] = report.unchecked
    print(json.dumps(output, indent=2))
    if not report.consistent:
        print("foldline: consistency check failed: nothing after it was verified", file=sys.stderr)
    for v in report.violations:
        print(f"foldline: position {v.position}: {v.kind}: {v.detail}", file=sys.stderr)
    if report.consistent:
        print(
            f"foldline: consistent with checkpoint of {m} events (signature {signature});"
            f" verified events {m + 1}..{n}" + ("" if report.ok else ": violations found"),
            file=sys.stderr,
        )
    return OK if report.ok else FOUND
