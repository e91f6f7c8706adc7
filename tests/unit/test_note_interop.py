"""Signed checkpoints and proofs of a real log, checked by code not written here.

tlog-scales 0.0.3 (PyPI, in the ``test`` extras; Apache-2.0, the tlog-tiles library split out
of the sigmon and cross-examination witnesses) implements C2SP signed-note keys (``Vkey``: the
key hash of name, 0x0a, type and key), tlog-checkpoint notes (``Checkpoint``: parse, serialize,
verify a signature line against a key) and RFC 9162's proof checks (``InclusionProof.check``
and ``ConsistencyProof.check``, line-by-line transcriptions of sections 2.1.3.2 and 2.1.4.2).
It shares no code with ``engine.audit`` but the Ed25519 primitive (pyca/cryptography); Go's
published ``golang.org/x/mod/sumdb/note`` vectors pin that part byte for byte: Ed25519 is
deterministic, so our signer must reproduce Go's signature exactly.

The log is real: built through the engine into SQLite, its key made and its checkpoint signed
by the ``foldline`` command line, its proofs the JSON that ``foldline prove`` prints.
"""

from __future__ import annotations

import base64
import random
from pathlib import Path

import apsw
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tlog_scales.signing import PlainEd25519Signer, Vkey
from tlog_scales.tlog import (
    Checkpoint,
    ConsistencyProof,
    ConsistencyProofInvalid,
    InclusionProof,
    InclusionProofInvalid,
)

from engine.audit import note, proofs
from engine.audit.source import reading
from engine.errors import InvalidArgument
from tests.cli.test_audit import make_log
from tests.support.cli import foldline

# The sizes issue 31 names: the small trees where the decomposition's edge cases live, one of a
# thousand, and a large one drawn (seeded) below 5,000; the log's head comes last.
SIZES = (1, 2, 3, 7, 8, 9, 1000, random.Random(9162).randrange(1001, 5000))


@pytest.fixture(scope="module")
def long_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real SQLite log of some 5,000 events (seven a session), built through the engine."""
    path = tmp_path_factory.mktemp("note-interop") / "log.db"
    make_log(path, sessions=720)
    return path


@pytest.fixture(scope="module")
def sizes(long_log: Path) -> tuple[int, ...]:
    conn = apsw.Connection(str(long_log), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        ((head,),) = conn.execute("SELECT max(position) FROM events").fetchall()
    finally:
        conn.close()
    return (*SIZES, head)


def ok(*args: str) -> str:
    done = foldline(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def their_key(verifier_text: str) -> Vkey:
    """tlog-scales' key for our verifier text, its key hash recomputed from name and key."""
    parsed = Vkey.from_string(verifier_text)
    recomputed = Vkey(parsed.name, None, parsed.sig_type, parsed.pubkey)
    assert recomputed.key_id == parsed.key_id, "our key hash is not the C2SP key hash"
    assert recomputed.serialize() == verifier_text
    return recomputed


def test_note_interop_tlog_scales_verifies_our_signed_checkpoint(
    long_log: Path, sizes: tuple[int, ...], tmp_path: Path
) -> None:
    key = tmp_path / "log.key"
    vkey = their_key(ok("keygen", "example.com/foldline", "--out", str(key)).strip())
    signed = ok("checkpoint", str(long_log), "--key", str(key))
    theirs = Checkpoint.from_text(signed)
    theirs.verify(vkey)
    assert theirs.serialize() == signed  # the same bytes, framing and all
    head = sizes[-1]
    assert (theirs.origin, theirs.size) == ("example.com/foldline", head)
    assert [s.key_id for s in theirs.signatures] == [vkey.key_id]

    body, _, signature_line = signed.rpartition("\n\n")
    root_line = body.splitlines()[2]
    flipped_root = root_line[:5] + ("A" if root_line[5] != "A" else "B") + root_line[6:]
    dash, name, encoded = signature_line.split()
    blob = bytearray(b64(encoded))
    blob[10] ^= 0x01  # a byte of the Ed25519 signature, past the key hash
    for bent in (
        signed.replace(root_line, flipped_root),
        signed.replace(f"\n{head}\n", f"\n{head - 1}\n"),
        signed.replace("example.com/foldline\n", "example.com/foldlinf\n", 1),
        f"{body}\n\n{dash} {name} {base64.b64encode(bytes(blob)).decode()}\n",
    ):
        with pytest.raises(InvalidSignature):
            Checkpoint.from_text(bent).verify(vkey)

    other = note.generate_signer("example.com/foldline").verifier
    with pytest.raises(RuntimeError, match="no signature matched"):  # another key hash
        theirs.verify(their_key(other.text()))
    impostor = Vkey(vkey.name, vkey.key_id, 1, other.public)  # our key hash, another key
    with pytest.raises(InvalidSignature):
        theirs.verify(impostor)


def test_note_interop_tlog_scales_verifies_our_checkpoints_at_every_size(
    long_log: Path, sizes: tuple[int, ...]
) -> None:
    signer = note.generate_signer("example.com/foldline")
    vkey = their_key(signer.verifier.text())
    ours = PlainEd25519Signer(signer.name, signer.seed)  # their signer, our seed
    with reading(str(long_log)) as reader:
        for size in sizes:
            root = b64(proofs.consistency(reader, size, size)["new_root"])
            signed = note.sign_note(note.TreeHead(signer.name, size, root).text(), signer)
            theirs = Checkpoint.from_text(signed)
            theirs.verify(vkey)
            assert (theirs.size, theirs.root_hash) == (size, root)
            # Ed25519 is deterministic: their signer, given our key, writes our very note.
            assert Checkpoint.make_signed(signer.name, size, root, [ours]).serialize() == signed


def test_note_interop_our_verifier_opens_a_tlog_scales_checkpoint() -> None:
    signer = PlainEd25519Signer("witness.example/log", Ed25519PrivateKey.generate())
    signed = Checkpoint.make_signed("witness.example/log", 42, bytes(range(32)), [signer])
    verifier = note.parse_verifier(signer.vkey.serialize())
    head = note.parse_checkpoint(note.open_note(signed.serialize(), verifier))
    assert (head.origin, head.size, head.root) == ("witness.example/log", 42, bytes(range(32)))
    with pytest.raises(InvalidArgument, match="does not verify"):
        note.open_note(signed.serialize().replace("\n42\n", "\n43\n"), verifier)


def test_note_interop_tlog_scales_checks_our_inclusion_proofs(
    long_log: Path, sizes: tuple[int, ...]
) -> None:
    rng = random.Random(6962)
    with reading(str(long_log)) as reader:
        for size in sizes:
            indices = range(size) if size < 10 else {0, size - 1, *rng.sample(range(size), 8)}
            for index in sorted(indices):
                proof = proofs.inclusion(reader, index + 1, size)
                path = [b64(node) for node in proof["proof"]]
                leaf, root = b64(proof["leaf_hash"]), b64(proof["root"])
                InclusionProof(index, size, path).check(leaf, root)
                if path:
                    bent = [*path[:-1], bytes(32)]
                    with pytest.raises(InclusionProofInvalid):
                        InclusionProof(index, size, bent).check(leaf, root)


def test_note_interop_tlog_scales_checks_our_consistency_proofs(
    long_log: Path, sizes: tuple[int, ...]
) -> None:
    with reading(str(long_log)) as reader:
        for new in sizes:
            for old in (s for s in sizes if s <= new):
                proof = proofs.consistency(reader, old, new)
                path = [b64(node) for node in proof["proof"]]
                first, second = b64(proof["old_root"]), b64(proof["new_root"])
                ConsistencyProof(old, new, path).check(first, second)
                if old < new:
                    with pytest.raises(ConsistencyProofInvalid):
                        ConsistencyProof(old, new, [*path[:-1], bytes(32)]).check(first, second)
                    with pytest.raises(ConsistencyProofInvalid):
                        ConsistencyProof(old, new, path).check(first, bytes(32))


# golang.org/x/mod/sumdb/note's published test keys and notes (note_test.go: TestNewVerifier,
# TestSign, TestOpen): the format's reference implementation, which C2SP signed-note writes down.
GO_SIGNER = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_PETER = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_ENOCH = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvq"
    "fqdngotpRZb6KE6RyyBwJnAM=\n"
)
GO_ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTG"
    "wnWLox33WWd1RvMc+QQ=\n"
)


def test_note_interop_our_signer_reproduces_go_sumdb_note_signature() -> None:
    signer = note.parse_signer(GO_SIGNER)
    assert signer.text() == GO_SIGNER
    assert signer.verifier.text() == GO_PETER
    assert note.sign_note(GO_TEXT, signer) == GO_TEXT + "\n" + GO_PETER_SIG


def test_note_interop_our_verifier_opens_go_sumdb_notes() -> None:
    signed = GO_TEXT + "\n" + GO_PETER_SIG + GO_ENOCH_SIG
    for key in (GO_PETER, GO_ENOCH):
        verifier = note.parse_verifier(key)
        assert verifier.text() == key
        assert note.open_note(signed, verifier) == GO_TEXT
    broken = GO_TEXT + "\n" + GO_PETER_SIG[:60] + "ABCD" + GO_PETER_SIG[60:]  # TestOpen's
    with pytest.raises(InvalidArgument, match="does not verify"):
        note.open_note(broken, note.parse_verifier(GO_PETER))


@pytest.mark.parametrize(
    "key",
    [  # TestNewVerifier's: a wrong-length key and an unknown algorithm, each with its key hash
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ],
)
def test_note_interop_our_verifier_refuses_go_sumdb_bad_keys(key: str) -> None:
    with pytest.raises(InvalidArgument):
        note.parse_verifier(key)
