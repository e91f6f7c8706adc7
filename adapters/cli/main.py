"""The ``foldline`` command line: the parser, and ``main``. JSON goes to stdout, messages to
stderr; the exit code of every failure comes from ``adapters.cli.exits``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from adapters.cli.audit import (
    run_checkpoint,
    run_copy,
    run_diff,
    run_export,
    run_history,
    run_machines,
    run_rebuild,
    run_state,
    run_tail,
    run_verify,
)
from adapters.cli.exits import OK, refuse
from adapters.cli.keep import add_commands as add_keep_commands
from adapters.cli.proofs import add_commands as add_proof_commands
from adapters.cli.replay import add_command as add_replay
from adapters.cli.serving import run_console, run_front, run_serve, run_token
from adapters.cli.verify_proof import add_command as add_verify_proof
from adapters.settings.declarations import ENVIRONMENT, GROUP
from engine import EngineError


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
    serve.set_defaults(run=run_serve)
    front = commands.add_parser(
        "front",
        help="serve one AgentCore session id in its own directory through a worker (root)",
        epilog="example: FOLDLINE_SESSION_BASE=/mnt/efs foldline front --bind 0.0.0.0:8080",
    )
    front.add_argument(
        "--workspace",
        help="the worker's fixed workspace path (default: $FOLDLINE_WORKSPACE or /workspace)",
    )
    front.add_argument("--bind", help="HOST:PORT (default: $FOLDLINE_BIND or 0.0.0.0:8080)")
    front.set_defaults(run=run_front)
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
    token.set_defaults(run=run_token)
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
    machines.set_defaults(run=run_machines)

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
        run_verify,
    )
    verify_cmd.add_argument("db")
    anchors = verify_cmd.add_mutually_exclusive_group()
    anchors.add_argument("--against", metavar="FILE", help="a checkpoint the log must still extend")
    anchors.add_argument(
        "--since",
        metavar="CHECKPOINT",
        help="a tlog-checkpoint (signed note or bare): prove the log extends it, then verify"
        " only the events after it",
    )
    verify_cmd.add_argument(
        "--key", metavar="VERIFIER_KEY", help="with --since: the key that must sign it (or a file)"
    )
    checkpoint_cmd = command(
        "checkpoint",
        "print a trust anchor (position, hash, time, streams) to keep outside the log",
        "foldline checkpoint .foldline/foldline.db > anchor.json",
        run_checkpoint,
    )
    checkpoint_cmd.add_argument("db")
    checkpoint_cmd.add_argument(
        "--key", metavar="FILE", help="sign a C2SP tlog-checkpoint with this signer key instead"
    )
    checkpoint_cmd.add_argument(
        "--origin", help="the checkpoint's origin (default: the key's name); alone: unsigned"
    )
    diff_cmd = command(
        "diff",
        "tell two logs apart: first divergence, streams, entities",
        "foldline diff backup.db live.db --json",
        run_diff,
    )
    diff_cmd.add_argument("a")
    diff_cmd.add_argument("b")
    diff_cmd.add_argument("--at", type=int, help="compare entity states at this position")
    diff_cmd.add_argument("--json", action="store_true", help="machine-readable output")
    history_cmd = command(
        "history",
        "one stream's events as JSON lines",
        "foldline history .foldline/foldline.db job:job_18c",
        run_history,
    )
    history_cmd.add_argument("db")
    history_cmd.add_argument("stream")
    state_cmd = command(
        "state",
        "every stream's head at a position or a time",
        "foldline state .foldline/foldline.db --time 2026-11-30T06:00:00Z",
        run_state,
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
        run_export,
    )
    export_cmd.add_argument("db")
    export_cmd.add_argument("--from", dest="start", type=int, default=1)
    export_cmd.add_argument("--to", dest="end", type=int)
    tail_cmd = command(
        "tail",
        "the last events, and with --follow the new ones as they land",
        "foldline tail .foldline/foldline.db --follow",
        run_tail,
    )
    tail_cmd.add_argument("db")
    tail_cmd.add_argument("--lines", type=int, default=10)
    tail_cmd.add_argument("--follow", action="store_true")
    copy_cmd = command(
        "copy",
        "copy a log between backends (SQLite file, postgresql:// URL) with its chain",
        "foldline copy .foldline/foldline.db 'postgresql://host/db?schema=ws1'",
        run_copy,
    )
    copy_cmd.add_argument("source")
    copy_cmd.add_argument("target")
    rebuild_cmd = command(
        "rebuild",
        "drop and refold every projection (writes the file)",
        "foldline rebuild .foldline/foldline.db",
        run_rebuild,
    )
    rebuild_cmd.add_argument("db")
    rebuild_cmd.add_argument(
        "--force",
        action="store_true",
        help="refold even when events break the rules in force when they were recorded",
    )
    console_cmd = command(
        "console",
        "serve the operator console read-only over a log (no lease, no writes)",
        "foldline console .foldline/foldline.db --bind 127.0.0.1:8081",
        run_console,
    )
    console_cmd.add_argument("db")
    console_cmd.add_argument("--bind", default="127.0.0.1:8081", help="HOST:PORT")
    add_proof_commands(commands)
    add_verify_proof(commands)
    add_replay(commands)
    add_keep_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except EngineError as ex:
        return refuse(ex)
    except BrokenPipeError:  # the reader (head, less) went away: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    return code


if __name__ == "__main__":
    sys.exit(main())
