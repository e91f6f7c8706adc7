"""The commands that make what an auditor checks without the log: ``keygen``, a signed
``checkpoint --key`` (or its unsigned text with ``--origin``), and ``prove inclusion`` /
``prove consistency``. The checks themselves are ``adapters.cli.verify_proof``.

Proofs print as JSON with every hash in standard base64; the shapes are in docs/auditing.md
("Proofs without the log").
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from adapters.cli.exits import OK
from adapters.settings.log_sources import reading
from engine.audit.note import TreeHead, generate_signer, parse_signer, sign_note
from engine.errors import InvalidArgument
from engine.keep.archive import inclusion as archived_inclusion
from engine.keep.archive import is_archived
from engine.merkle import proofs
from engine.merkle.tree import open_tree
from engine.storage import parse_target


def run_keygen(args: argparse.Namespace) -> int:
    """Write a new signer key (mode 0600, never over an existing file); print its verifier."""
    signer = generate_signer(args.name)
    text = signer.text() + "\n"  # made (and its name judged) before any file is
    out = Path(args.out or f"{args.name.replace('/', '_')}.key")
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as ex:
        raise InvalidArgument(f"{out}: exists; a key is never overwritten") from ex
    except OSError as ex:
        raise InvalidArgument(f"{out}: {ex.strerror}") from ex
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    print(signer.verifier.text())
    return OK


def read_text(path: str, what: str) -> str:
    """A file's text, or a one-line error naming the option it came from."""
    try:  # the bytes as they are: a CR is kept (and refused by the note's checks)
        return Path(path).read_bytes().decode("utf-8")
    except OSError as ex:
        raise InvalidArgument(f"{what} {path}: {ex.strerror}") from ex
    except UnicodeDecodeError as ex:
        raise InvalidArgument(f"{what} {path}: not UTF-8 text") from ex


def tree_head(db: str, origin: str) -> TreeHead:
    """The log's current size and tree head under ``origin``."""
    with reading(db) as reader:  # the tree reads the log as it hashes: inside the block
        tree = open_tree(reader)
        return TreeHead(origin, tree.size, tree.root())


def signed_checkpoint(args: argparse.Namespace) -> int:
    """``checkpoint --key`` (a signed note) or ``checkpoint --origin`` (its text alone)."""
    signer = parse_signer(read_text(args.key, "--key")) if args.key else None
    origin = args.origin or (signer.name if signer else "")
    head = tree_head(args.db, origin)
    print(sign_note(head.text(), signer) if signer else head.text(), end="")
    return OK


def run_prove_inclusion(args: argparse.Namespace) -> int:
    if not parse_target(args.db).remote and is_archived(args.db, args.position):
        proof = archived_inclusion(args.db, args.position, args.size)  # from its segment
        print(json.dumps(proof, indent=2))
        return OK
    with reading(args.db) as reader:
        proof = proofs.inclusion(reader, args.position, args.size, "--size")
    print(json.dumps(proof, indent=2))
    return OK


def run_prove_consistency(args: argparse.Namespace) -> int:
    with reading(args.db) as reader:
        proof = proofs.consistency(reader, args.old_size, args.new_size)
    print(json.dumps(proof, indent=2))
    return OK


def add_commands(commands: Any) -> None:
    """Register ``keygen`` and ``prove`` (``checkpoint``'s options are added by main)."""
    keygen = commands.add_parser(
        "keygen",
        help="make an Ed25519 signer key for checkpoints; print its verifier key",
        epilog="example: foldline keygen example.com/foldline-prod --out prod.key",
    )
    keygen.add_argument("name", help="the key's name (no spaces, no '+'); also the origin")
    keygen.add_argument("--out", metavar="FILE", help="where to write it (default NAME.key)")
    keygen.set_defaults(run=run_keygen)
    prove = commands.add_parser(
        "prove",
        help="print an inclusion or consistency proof of the log's Merkle tree as JSON",
        epilog="example: foldline prove inclusion .foldline/foldline.db 42",
    )
    kinds = prove.add_subparsers(dest="proof", required=True)
    inclusion = kinds.add_parser("inclusion", help="the event at POSITION is in the tree")
    inclusion.add_argument("db")
    inclusion.add_argument("position", type=int)
    inclusion.add_argument("--size", type=int, help="the tree's size (default: the log's head)")
    inclusion.set_defaults(run=run_prove_inclusion)
    consistency = kinds.add_parser("consistency", help="the tree at NEW_SIZE extends OLD_SIZE")
    consistency.add_argument("db")
    consistency.add_argument("old_size", type=int)
    consistency.add_argument("new_size", type=int, nargs="?", help="default: the log's head")
    consistency.set_defaults(run=run_prove_consistency)
