"""Signed checkpoints and proofs of a real log, checked by code not written here.

Two published implementations of C2SP signed notes, tlog-checkpoint and RFC 9162's proofs,
both PyPI packages in the ``test`` extras, check what we sign and prove:
- tlog-scales 0.0.3 (Apache-2.0; the tlog-tiles library split out of the sigmon and
  cross-examination witnesses), pure Python: ``Vkey`` (a key and its key hash of name, 0x0a,
  type and key), ``Checkpoint`` (parse, serialize, verify a signature line against a key), and
  ``InclusionProof.check`` / ``ConsistencyProof.check``, line-by-line transcriptions of RFC
  9162 sections 2.1.3.2 and 2.1.4.2. It shares pyca/cryptography's Ed25519 with us.
- metamorphic-log 0.1.11 (Apache-2.0 OR MIT), the verification-only Python binding (UniFFI)
  of a Rust crate: ``checkpoint_verify``, ``verify_signed_note``, and inclusion and
  consistency proofs checked against signed checkpoints. Its Ed25519 is ed25519-dalek and its
  SHA-256 RustCrypto's, so nothing of ours or of OpenSSL's is on its path.
Go's published ``golang.org/x/mod/sumdb/note`` vectors, last, pin the format byte for byte:
Ed25519 is deterministic, so our signer must reproduce Go's signature exactly.

The log is real: built through the engine into SQLite, its key made and its checkpoint signed
by the ``foldline`` command line, its proofs the JSON that ``foldline prove`` prints, at the
sizes issue 31 names.
"""

from __future__ import annotations

import base64
import random
from dataclasses import dataclass
from pathlib import Path

import apsw
import metamorphic_log
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

from engine.audit import note
from engine.audit.source import reading
from engine.errors import InvalidArgument
from engine.merkle import proofs
from tests.cli.test_audit import make_log
from tests.support.cli import foldline

# The small trees where the decomposition's edge cases live, one of a thousand, and a large one
# drawn (seeded) below 5,000; the log's head comes last.
SIZES = (1, 2, 3, 7, 8, 9, 1000, random.Random(9162).randrange(1001, 5000))
ORIGIN = "example.com/foldline"
NOT_VERIFIED = metamorphic_log.VerifyError.Verification


def b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


@dataclass(frozen=True)
class Signed:
    """A verifier key's text and a checkpoint note it verifies, of a tree of ``size``."""

    verifier: str
    note: str
    size: int
    root: bytes

    def bent(self) -> list[str]:
        """The note with a flipped root, size, origin or signature byte: none may verify."""
        body, _, line = self.note.rpartition("\n\n")
        root = body.splitlines()[2]
        flipped_root = root[:5] + ("A" if root[5] != "A" else "B") + root[6:]
        dash, name, encoded = line.split()
        blob = bytearray(b64(encoded))
        blob[10] ^= 0x01  # a byte of the Ed25519 signature, past the key hash
        return [
            self.note.replace(root, flipped_root),
            self.note.replace(f"\n{self.size}\n", f"\n{self.size + 1}\n"),
            self.note.replace(f"{ORIGIN}\n", f"{ORIGIN}x\n", 1),
            f"{body}\n\n{dash} {name} {base64.b64encode(bytes(blob)).decode()}\n",
        ]


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


@pytest.fixture(scope="module")
def from_cli(long_log: Path, tmp_path_factory: pytest.TempPathFactory) -> Signed:
    """What ``foldline keygen`` prints and ``foldline checkpoint --key`` signs."""
    key = tmp_path_factory.mktemp("note-interop-key") / "log.key"
    made = foldline("keygen", ORIGIN, "--out", str(key))
    signed = foldline("checkpoint", str(long_log), "--key", str(key))
    assert made.returncode == signed.returncode == 0, (made.stderr, signed.stderr)
    head = note.parse_checkpoint(signed.stdout.rpartition("\n\n")[0] + "\n")
    return Signed(made.stdout.strip(), signed.stdout, head.size, head.root)


@pytest.fixture(scope="module")
def signer() -> note.Signer:
    return note.generate_signer(ORIGIN)


@pytest.fixture(scope="module")
def by_size(long_log: Path, sizes: tuple[int, ...], signer: note.Signer) -> dict[int, Signed]:
    """Our signed checkpoint of the tree of each size, its root as ``prove`` serves it."""
    found = {}
    with reading(str(long_log)) as reader:
        for size in sizes:
            root = b64(proofs.consistency(reader, size, size)["new_root"])
            text = note.sign_note(note.TreeHead(ORIGIN, size, root).text(), signer)
            found[size] = Signed(signer.verifier.text(), text, size, root)
    return found


@dataclass(frozen=True)
class Inclusion:
    index: int
    size: int
    leaf: bytes
    root: bytes
    path: list[bytes]


@pytest.fixture(scope="module")
def inclusions(long_log: Path, sizes: tuple[int, ...]) -> list[Inclusion]:
    """``prove inclusion``'s proofs: every leaf of the small trees, ten of each large one."""
    rng = random.Random(6962)
    found = []
    with reading(str(long_log)) as reader:
        for size in sizes:
            indices = range(size) if size < 10 else {0, size - 1, *rng.sample(range(size), 8)}
            for index in sorted(indices):
                p = proofs.inclusion(reader, index + 1, size)
                path = [b64(node) for node in p["proof"]]
                found.append(Inclusion(index, size, b64(p["leaf_hash"]), b64(p["root"]), path))
    return found


@dataclass(frozen=True)
class Consistency:
    old: int
    new: int
    first: bytes
    second: bytes
    path: list[bytes]


@pytest.fixture(scope="module")
def consistencies(long_log: Path, sizes: tuple[int, ...]) -> list[Consistency]:
    """``prove consistency``'s proofs between every two of the sizes, old <= new."""
    found = []
    with reading(str(long_log)) as reader:
        for new in sizes:
            for old in (s for s in sizes if s <= new):
                p = proofs.consistency(reader, old, new)
                path = [b64(node) for node in p["proof"]]
                found.append(Consistency(old, new, b64(p["old_root"]), b64(p["new_root"]), path))
    return found


def their_key(verifier_text: str) -> Vkey:
    """tlog-scales' key for our verifier text, its key hash recomputed from name and key."""
    parsed = Vkey.from_string(verifier_text)
    recomputed = Vkey(parsed.name, None, parsed.sig_type, parsed.pubkey)
    assert recomputed.key_id == parsed.key_id, "our key hash is not the C2SP key hash"
    assert recomputed.serialize() == verifier_text
    return recomputed


# tlog-scales


def test_note_interop_tlog_scales_verifies_our_signed_checkpoint(
    from_cli: Signed, sizes: tuple[int, ...]
) -> None:
    vkey = their_key(from_cli.verifier)
    theirs = Checkpoint.from_text(from_cli.note)
    theirs.verify(vkey)
    assert theirs.serialize() == from_cli.note  # the same bytes, framing and all
    assert (theirs.origin, theirs.size, theirs.root_hash) == (ORIGIN, sizes[-1], from_cli.root)
    assert [s.key_id for s in theirs.signatures] == [vkey.key_id]
    for bent in from_cli.bent():
        with pytest.raises(InvalidSignature):
            Checkpoint.from_text(bent).verify(vkey)

    other = note.generate_signer(ORIGIN).verifier
    with pytest.raises(RuntimeError, match="no signature matched"):  # another key hash
        theirs.verify(their_key(other.text()))
    impostor = Vkey(vkey.name, vkey.key_id, 1, other.public)  # our key hash, another key
    with pytest.raises(InvalidSignature):
        theirs.verify(impostor)


def test_note_interop_tlog_scales_verifies_our_checkpoints_at_every_size(
    by_size: dict[int, Signed], signer: note.Signer
) -> None:
    vkey = their_key(signer.verifier.text())
    ours = PlainEd25519Signer(signer.name, signer.seed)  # their signer, our seed
    for size, signed in by_size.items():
        theirs = Checkpoint.from_text(signed.note)
        theirs.verify(vkey)
        assert (theirs.size, theirs.root_hash) == (size, signed.root)
        # Ed25519 is deterministic: their signer, given our key, writes our very note.
        assert Checkpoint.make_signed(ORIGIN, size, signed.root, [ours]).serialize() == signed.note


def test_note_interop_our_verifier_opens_a_tlog_scales_checkpoint() -> None:
    signer = PlainEd25519Signer("witness.example/log", Ed25519PrivateKey.generate())
    signed = Checkpoint.make_signed("witness.example/log", 42, bytes(range(32)), [signer])
    verifier = note.parse_verifier(signer.vkey.serialize())
    head = note.parse_checkpoint(note.open_note(signed.serialize(), verifier))
    assert (head.origin, head.size, head.root) == ("witness.example/log", 42, bytes(range(32)))
    with pytest.raises(InvalidArgument, match="does not verify"):
        note.open_note(signed.serialize().replace("\n42\n", "\n43\n"), verifier)


def test_note_interop_tlog_scales_checks_our_inclusion_proofs(
    inclusions: list[Inclusion],
) -> None:
    for p in inclusions:
        InclusionProof(p.index, p.size, p.path).check(p.leaf, p.root)
        if p.path:
            bent = InclusionProof(p.index, p.size, [*p.path[:-1], bytes(32)])
            with pytest.raises(InclusionProofInvalid):
                bent.check(p.leaf, p.root)


def test_note_interop_tlog_scales_checks_our_consistency_proofs(
    consistencies: list[Consistency],
) -> None:
    for p in consistencies:
        ConsistencyProof(p.old, p.new, p.path).check(p.first, p.second)
        if p.old < p.new:
            with pytest.raises(ConsistencyProofInvalid):
                ConsistencyProof(p.old, p.new, [*p.path[:-1], bytes(32)]).check(p.first, p.second)
            with pytest.raises(ConsistencyProofInvalid):
                ConsistencyProof(p.old, p.new, p.path).check(p.first, bytes(32))


# metamorphic-log


def test_note_interop_metamorphic_log_verifies_our_signed_checkpoint(
    from_cli: Signed, sizes: tuple[int, ...]
) -> None:
    head = metamorphic_log.checkpoint_verify(from_cli.note, [from_cli.verifier])
    assert (head.origin, head.size, head.root, head.extensions) == (
        ORIGIN,
        sizes[-1],
        from_cli.root,
        [],
    )
    assert metamorphic_log.verify_signed_note(from_cli.note, [from_cli.verifier]) == 1
    for bent in from_cli.bent():
        with pytest.raises(NOT_VERIFIED):
            metamorphic_log.checkpoint_verify(bent, [from_cli.verifier])
    other = note.generate_signer(ORIGIN).verifier
    with pytest.raises(NOT_VERIFIED, match="no verifiable signature"):
        metamorphic_log.checkpoint_verify(from_cli.note, [other.text()])
    impostor = f"{ORIGIN}+{from_cli.verifier.split('+')[1]}+{other.text().split('+', 2)[2]}"
    with pytest.raises(metamorphic_log.VerifyError):  # our key hash over another key
        metamorphic_log.checkpoint_verify(from_cli.note, [impostor])


def test_note_interop_metamorphic_log_checks_our_inclusion_proofs_against_checkpoints(
    by_size: dict[int, Signed], inclusions: list[Inclusion]
) -> None:
    for p in inclusions:
        signed = by_size[p.size]
        metamorphic_log.checkpoint_verify_inclusion(
            signed.note, [signed.verifier], p.index, p.leaf, p.path
        )
        if p.path:
            with pytest.raises(NOT_VERIFIED):
                metamorphic_log.checkpoint_verify_inclusion(
                    signed.note, [signed.verifier], p.index, p.leaf, [*p.path[:-1], bytes(32)]
                )
    p = inclusions[-1]
    signed = by_size[p.size]
    with pytest.raises(NOT_VERIFIED):  # a good proof, but its checkpoint bent
        metamorphic_log.checkpoint_verify_inclusion(
            signed.bent()[0], [signed.verifier], p.index, p.leaf, p.path
        )


def test_note_interop_metamorphic_log_checks_our_consistency_proofs_between_checkpoints(
    by_size: dict[int, Signed], consistencies: list[Consistency]
) -> None:
    for p in consistencies:
        old, new = by_size[p.old], by_size[p.new]
        assert (old.root, new.root) == (p.first, p.second)
        metamorphic_log.checkpoint_verify_consistency(old.note, new.note, [new.verifier], p.path)
        if p.old < p.new:
            with pytest.raises(NOT_VERIFIED):
                metamorphic_log.checkpoint_verify_consistency(
                    old.note, new.note, [new.verifier], [*p.path[:-1], bytes(32)]
                )
            with pytest.raises(NOT_VERIFIED):  # the proof of another pair of sizes
                metamorphic_log.checkpoint_verify_consistency(
                    old.note, new.note, [new.verifier], [bytes(32), *p.path]
                )


# Go's published vectors

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
