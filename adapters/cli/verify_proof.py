"""``foldline verify-proof``: check a signed checkpoint, and proofs against it, without the log.

All it needs is the verifier key, the checkpoint(s) and the proof JSON that ``foldline prove``
printed. Exit 0 when everything given checks, 1 with one line saying what did not, 2 when an
argument cannot be read (a missing file, a malformed key).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
from pathlib import Path
from typing import Any

from adapters.cli.exits import FOUND, OK
from adapters.cli.proofs import read_text
from engine import merkle
from engine.audit.note import TreeHead, Verifier, open_note, parse_checkpoint, parse_verifier
from engine.errors import InvalidArgument


class Rejected(Exception):
    """What was given does not check; the message is the reason."""


def _checkpoint(path: str, what: str, verifier: Verifier) -> TreeHead:
    text = read_text(path, what)
    try:
        return parse_checkpoint(open_note(text, verifier))
    except InvalidArgument as ex:
        raise Rejected(f"{what} {path}: {ex}") from ex


def _proof(path: str, what: str, fields: tuple[str, ...]) -> dict[str, Any]:
    text = read_text(path, what)  # InvalidArgument (exit 2): a file that cannot be read
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or any(name not in data for name in fields):
            raise ValueError(f"needs {', '.join(fields)}")
        for name in fields:
            value = data[name]
            if name == "proof":
                if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                    raise ValueError("proof is not a list of base64 strings")
                data[name] = [base64.b64decode(node, validate=True) for node in value]
            elif name.endswith(("root", "hash")):
                data[name] = base64.b64decode(value, validate=True)
            elif not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} is not an integer")
    except (ValueError, TypeError, RecursionError, binascii.Error) as ex:
        raise Rejected(f"{what} {path}: not a proof: {ex}") from ex
    return data


def check_inclusion(path: str, head: TreeHead, chain_hash: bytes | None = None) -> str:
    fields = ("size", "root", "position", "leaf_index", "chain_hash", "leaf_hash", "proof")
    p = _proof(path, "--inclusion", fields)
    if p["size"] != head.size or p["root"] != head.root:
        raise Rejected(f"--inclusion {path}: its size and root are not the checkpoint's")
    if p["leaf_index"] != p["position"] - 1:
        raise Rejected(f"--inclusion {path}: leaf_index is not position - 1")
    if merkle.leaf_hash(p["chain_hash"]) != p["leaf_hash"]:
        raise Rejected(f"--inclusion {path}: leaf_hash is not the hash of chain_hash")
    if chain_hash is not None and p["chain_hash"] != chain_hash:
        raise Rejected(f"--inclusion {path}: its chain hash is not --chain-hash")
    leaf, index = p["leaf_hash"], p["leaf_index"]
    if not merkle.verify_inclusion(leaf, index, head.size, p["proof"], head.root):
        raise Rejected(f"--inclusion {path}: the proof does not verify")
    chain = base64.b64encode(p["chain_hash"]).decode()
    return f"position {p['position']} is in the tree, the event whose chain hash is {chain}"


def check_consistency(path: str, old: TreeHead, new: TreeHead) -> str:
    fields = ("old_size", "new_size", "old_root", "new_root", "proof")
    p = _proof(path, "--consistency", fields)
    if (p["old_size"], p["old_root"]) != (old.size, old.root):
        raise Rejected(f"--consistency {path}: its old size and root are not --old-checkpoint's")
    if (p["new_size"], p["new_root"]) != (new.size, new.root):
        raise Rejected(f"--consistency {path}: its new size and root are not --checkpoint's")
    if old.origin != new.origin:
        raise Rejected("the two checkpoints are of different origins")
    if not merkle.verify_consistency(old.size, new.size, p["proof"], old.root, new.root):
        raise Rejected(f"--consistency {path}: the proof does not verify")
    return f"size {new.size} extends size {old.size}"


def verifier_key(value: str) -> Verifier:
    """A verifier key given as its text, or as a file holding it."""
    try:
        is_file = Path(value).is_file()
    except OSError:  # a name too long for a path: the key's own text
        is_file = False
    return parse_verifier(read_text(value, "--key") if is_file else value)


def _chain_hash(value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as ex:
        raise InvalidArgument("--chain-hash: not base64") from ex


def run_verify_proof(args: argparse.Namespace) -> int:
    if args.consistency and not args.old_checkpoint:
        raise InvalidArgument("--consistency needs --old-checkpoint")
    verifier = verifier_key(args.key)
    try:
        head = _checkpoint(args.checkpoint, "--checkpoint", verifier)
        if args.origin and head.origin != args.origin:
            raise Rejected(f"--checkpoint: origin {head.origin!r}, not {args.origin!r}")
        said = [f"checkpoint {head.origin} at size {head.size} is signed by {verifier.name}"]
        if args.inclusion:
            said.append(check_inclusion(args.inclusion, head, _chain_hash(args.chain_hash)))
        if args.consistency:
            old = _checkpoint(args.old_checkpoint, "--old-checkpoint", verifier)
            said.append(check_consistency(args.consistency, old, head))
    except Rejected as ex:
        print(f"foldline: {ex}", file=sys.stderr)
        return FOUND
    print(f"ok: {'; '.join(said)}")
    return OK


def add_command(commands: Any) -> None:
    check = commands.add_parser(
        "verify-proof",
        help="check a signed checkpoint and proofs against it, without the log",
        epilog="example: foldline verify-proof --key prod.vkey --checkpoint cp.txt"
        " --inclusion proof.json",
    )
    check.add_argument("--key", required=True, help="the verifier key, or a file holding it")
    check.add_argument("--checkpoint", required=True, metavar="FILE", help="a signed checkpoint")
    check.add_argument("--origin", help="the origin the checkpoint must name")
    check.add_argument("--inclusion", metavar="PROOF.json", help="from foldline prove inclusion")
    check.add_argument(
        "--chain-hash", metavar="B64", help="the chain hash the proven event must have"
    )
    check.add_argument(
        "--consistency", metavar="PROOF.json", help="from foldline prove consistency"
    )
    check.add_argument(
        "--old-checkpoint", metavar="FILE", help="the checkpoint the consistency proof starts at"
    )
    check.set_defaults(run=run_verify_proof)
