"""``foldline keygen``, ``checkpoint --key``, ``prove`` and ``verify-proof``: what an auditor
keeps checks against the log's tree, and anything bent is refused in one line."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from engine import FixedClock
from engine.audit import note
from engine.audit.source import reading
from engine.domain import commands as c
from engine.merkle.tree import open_tree
from projections import open_engine
from tests.cli.test_audit import make_log
from tests.cli.test_audit_postgres import foldline as foldline_here
from tests.support.cli import foldline
from tests.support.postgres import session_cluster


def ok(*args: str) -> str:
    done = foldline(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def refused(*args: str, code: int = 2) -> str:
    """The one line a refused command prints."""
    done = foldline(*args)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    return done.stderr


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    key = tmp_path / "log.key"
    vkey = tmp_path / "log.vkey"
    vkey.write_text(ok("keygen", "audit.example/log", "--out", str(key)))
    return key, vkey


def test_keygen_writes_a_private_key_and_prints_its_verifier(
    keys: tuple[Path, Path], tmp_path: Path
) -> None:
    key, vkey = keys
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    signer = note.parse_signer(key.read_text())
    assert note.parse_verifier(vkey.read_text()) == signer.verifier
    assert "exists" in refused("keygen", "other", "--out", str(key))
    assert note.parse_signer(key.read_text()) == signer
    assert "key name" in refused("keygen", "has space", "--out", str(tmp_path / "x.key"))


def test_checkpoint_with_a_key_is_a_signed_c2sp_checkpoint_of_the_tree(
    clean: Path, keys: tuple[Path, Path]
) -> None:
    key, vkey = keys
    signed = ok("checkpoint", str(clean), "--key", str(key))
    text = note.open_note(signed, note.parse_verifier(vkey.read_text()))
    head = note.parse_checkpoint(text)
    with reading(clean) as reader:
        root = open_tree(reader).root()
    assert (head.origin, head.size, head.root) == ("audit.example/log", 23, root)
    other = ok("checkpoint", str(clean), "--key", str(key), "--origin", "x.example/o")
    assert other.startswith("x.example/o\n23\n")
    assert ok("checkpoint", str(clean), "--origin", "x.example/o") == text.replace(
        "audit.example/log", "x.example/o"
    )
    assert json.loads(ok("checkpoint", str(clean)))["position"] == 23  # unchanged without --key


def test_prove_prints_the_documented_shapes(clean: Path) -> None:
    inclusion = json.loads(ok("prove", "inclusion", str(clean), "5", "--size", "9"))
    assert set(inclusion) == {
        "size", "root", "position", "leaf_index", "chain_hash", "leaf_hash", "proof"
    }  # fmt: skip
    assert (inclusion["size"], inclusion["position"], inclusion["leaf_index"]) == (9, 5, 4)
    assert len(inclusion["proof"]) == 4 and all(
        len(base64.b64decode(h)) == 32 for h in inclusion["proof"]
    )
    consistency = json.loads(ok("prove", "consistency", str(clean), "7"))
    assert set(consistency) == {"old_size", "new_size", "old_root", "new_root", "proof"}
    assert (consistency["old_size"], consistency["new_size"]) == (7, 23)


@pytest.mark.parametrize(
    "args",
    [
        ("inclusion", "0"),
        ("inclusion", "24"),
        ("inclusion", "5", "--size", "24"),
        ("inclusion", "5", "--size", "4"),
        ("inclusion", "5", "--size", "0"),
        ("consistency", "0"),
        ("consistency", "9", "7"),
        ("consistency", "7", "24"),
    ],
)
def test_prove_refuses_bad_positions_and_sizes_in_one_line(
    clean: Path, args: tuple[str, ...]
) -> None:
    kind, *rest = args
    assert refused("prove", kind, str(clean), *rest).startswith("foldline: invalid_argument:")


def _grow(db: Path) -> None:
    engine = open_engine(db, clock=FixedClock())
    engine.handle(c.AcceptJob(job_id="later", session_id="s1", prompt="p"))
    engine.log.close()


def test_verify_proof_checks_checkpoints_and_proofs_without_the_log(
    clean: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    key, vkey = keys
    old = tmp_path / "old.txt"
    old.write_text(ok("checkpoint", str(clean), "--key", str(key)))
    _grow(clean)
    new = tmp_path / "new.txt"
    new.write_text(ok("checkpoint", str(clean), "--key", str(key)))
    inclusion = tmp_path / "inclusion.json"
    inclusion.write_text(ok("prove", "inclusion", str(clean), "3"))
    consistency = tmp_path / "consistency.json"
    consistency.write_text(ok("prove", "consistency", str(clean), "23"))
    clean.unlink()  # nothing below reads the log

    said = ok(
        "verify-proof", "--key", vkey.read_text().strip(), "--checkpoint", str(new),
        "--inclusion", str(inclusion), "--consistency", str(consistency),
        "--old-checkpoint", str(old), "--origin", "audit.example/log",
    )  # fmt: skip
    assert said.startswith("ok: ") and "position 3 is in the tree" in said and "extends" in said

    def check(*args: str) -> str:
        return refused("verify-proof", "--key", str(vkey), "--checkpoint", str(new), *args, code=1)

    proof = json.loads(inclusion.read_text())
    for field, value in (
        ("leaf_index", 3),
        ("position", 4),
        ("size", 24),
        ("proof", proof["proof"][:-1]),
        ("proof", [base64.b64encode(bytes(32)).decode(), *proof["proof"][1:]]),
        ("chain_hash", base64.b64encode(bytes(32)).decode()),
    ):
        bent = tmp_path / "bent.json"
        bent.write_text(json.dumps({**proof, field: value}))
        assert "--inclusion" in check("--inclusion", str(bent)), field
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps({**json.loads(consistency.read_text()), "old_size": 22}))
    assert "--consistency" in check("--consistency", str(swapped), "--old-checkpoint", str(old))
    assert "origin" in check("--origin", "other.example/log")

    tampered = tmp_path / "tampered.txt"
    tampered.write_text(new.read_text().replace("\n25\n", "\n26\n"))
    assert "does not verify" in refused(
        "verify-proof", "--key", str(vkey), "--checkpoint", str(tampered), code=1
    )
    stranger = tmp_path / "stranger.vkey"
    stranger.write_text(ok("keygen", "audit.example/log", "--out", str(tmp_path / "s.key")))
    assert "no signature" in refused(
        "verify-proof", "--key", str(stranger), "--checkpoint", str(new), code=1
    )
    refused("verify-proof", "--key", "not a key", "--checkpoint", str(new))
    refused("verify-proof", "--key", "a" * 300 + "+00000000+AAAA", "--checkpoint", str(new))
    refused("verify-proof", "--key", str(vkey), "--checkpoint", str(tmp_path / "none.txt"))
    refused("verify-proof", "--key", str(vkey), "--checkpoint", str(new), "--consistency", "x")
    # An unreadable proof is a usage error (2), not a finding (1).
    refused("verify-proof", "--key", str(vkey), "--checkpoint", str(new), "--inclusion", "none")

    # What a review found: a CRLF note is not the note signed; a proof must name its event.
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(new.read_bytes().replace(b"\n", b"\r\n"))
    refused("verify-proof", "--key", str(vkey), "--checkpoint", str(crlf), code=1)
    for bent_proof in (
        {k: v for k, v in proof.items() if k != "chain_hash"},
        {**proof, "proof": dict.fromkeys(proof["proof"], 1)},
        {**proof, "proof": "[" * 100_000},
    ):
        bent = tmp_path / "bent.json"
        bent.write_text(json.dumps(bent_proof))
        check("--inclusion", str(bent))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    check("--inclusion", str(deep))
    other_hash = base64.b64encode(bytes(32)).decode()
    assert "--chain-hash" in check("--inclusion", str(inclusion), "--chain-hash", other_hash)
    said = ok(
        "verify-proof", "--key", str(vkey), "--checkpoint", str(new), "--inclusion",
        str(inclusion), "--chain-hash", proof["chain_hash"],
    )  # fmt: skip
    assert proof["chain_hash"] in said
    huge = tmp_path / "huge.txt"
    huge.write_text(new.read_text().replace("\n25\n", "\n" + "9" * 5000 + "\n"))
    refused("verify-proof", "--key", str(vkey), "--checkpoint", str(huge), code=1)


def test_keygen_refuses_a_name_a_note_cannot_carry(tmp_path: Path) -> None:
    for name in ("a\x01b", "bad\udcff"):
        out = tmp_path / "k.key"
        assert "key name" in refused("keygen", name, "--out", str(out))
        assert not out.exists()  # judged before any file is made


def test_prove_reads_a_postgresql_log_in_place(tmp_path: Path) -> None:
    url = session_cluster().url_for(tmp_path)
    copy = tmp_path / "copy.db"
    make_log(url)  # type: ignore[arg-type]
    assert foldline_here("copy", url, str(copy)).returncode == 0
    for kind, args in (("inclusion", ("4",)), ("consistency", ("5", "20"))):
        there = foldline_here("prove", kind, url, *args)
        assert there.returncode == 0, there.stderr
        assert there.stdout == foldline_here("prove", kind, str(copy), *args).stdout
