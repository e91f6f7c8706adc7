"""Server-signed checkpoints on a real gunicorn (ADR 0040): the holder signs every few events,
``GET /v1/checkpoint`` answers the note without a token, and the proofs served over HTTP check
against it with the verifier key alone (and with ``foldline verify-proof``); a bad key file
stops the boot with one line."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine import merkle
from engine.audit.note import generate_signer, open_note, parse_checkpoint
from tests.support.cli import boot_refusal
from tests.support.server import ROOT, Server, serve

pytestmark = pytest.mark.server


def _get(server: Server, path: str) -> tuple[int, dict[str, str], bytes]:
    return server.request("GET", path, authorize=False)  # open: no token


def _wait_checkpoint(server: Server, at_least: int, limit: float = 30) -> str:
    """The served note once it covers ``at_least`` events (bounded poll)."""
    deadline = time.monotonic() + limit
    status, raw = 0, b""
    while time.monotonic() < deadline:
        status, _, raw = _get(server, "/v1/checkpoint")
        if status == 200:
            note = raw.decode()
            size = int(note.split("\n")[1])
            if size >= at_least:
                return note
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint of {at_least} events: {status} {raw[:200]!r}")


def _json(server: Server, path: str) -> Any:
    status, _, raw = _get(server, path)
    assert status == 200, raw
    return json.loads(raw)


def _b(text: str) -> bytes:
    return base64.b64decode(text)


def test_server_signs_checkpoints_and_serves_proofs_an_auditor_checks(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    signer = generate_signer("example.com/foldline-test")
    key = tmp_path / "test.key"
    key.write_text(signer.text() + "\n")
    env = {
        "FOLDLINE_CHECKPOINT_KEY": str(key),
        "FOLDLINE_CHECKPOINT_EVERY": "3",
        "FOLDLINE_CHECKPOINT_INTERVAL_S": "3600",
        "FOLDLINE_LEASE_RENEW_S": "0.3",
        "FOLDLINE_LEASE_STALE_S": "3",
    }
    with serve(workspace, env) as server:
        status, _, raw = _get(server, "/v1/checkpoint")
        assert status == 404 and json.loads(raw)["error"]["code"] == "not_found"
        for n in range(3):
            status, _ = server.invoke({"prompt": f"p{n}", "session": f"s{n}", "async": True})
            assert status == 200
        first = parse_checkpoint(open_note(_wait_checkpoint(server, 4), signer.verifier))
        assert first.origin == signer.name
        for n in range(3, 6):
            server.invoke({"prompt": f"p{n}", "session": f"s{n}", "async": True})
        note = _wait_checkpoint(server, first.size + 2)
        head = parse_checkpoint(open_note(note, signer.verifier))

        inclusion = _json(server, "/v1/proofs/inclusion?position=2")
        assert inclusion["size"] == head.size and _b(inclusion["root"]) == head.root
        proof = [_b(node) for node in inclusion["proof"]]
        leaf = merkle.leaf_hash(_b(inclusion["chain_hash"]))
        assert merkle.verify_inclusion(leaf, 1, head.size, proof, head.root)

        consistency = _json(server, f"/v1/proofs/consistency?old={first.size}")
        assert consistency["new_size"] == head.size
        assert _b(consistency["old_root"]) == first.root
        nodes = [_b(node) for node in consistency["proof"]]
        assert merkle.verify_consistency(first.size, head.size, nodes, first.root, head.root)

        refusals = {
            "/v1/proofs/inclusion": (400, "invalid_argument"),
            "/v1/proofs/inclusion?position=x": (400, "invalid_argument"),
            f"/v1/proofs/consistency?old={head.size + 50}": (404, "out_of_range"),
        }
        for path, (want, code) in refusals.items():
            status, _, raw = _get(server, path)
            assert (status, json.loads(raw)["error"]["code"]) == (want, code), raw

    files = {"cp.txt": note, "proof.json": json.dumps(inclusion), "vkey": signer.verifier.text()}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    cli = [sys.executable, "-m", "adapters.cli", "verify-proof", "--key", str(tmp_path / "vkey")]
    done = subprocess.run(
        [
            *cli,
            "--checkpoint",
            str(tmp_path / "cp.txt"),
            "--inclusion",
            str(tmp_path / "proof.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.startswith("ok:"), done.stderr


def test_a_bad_checkpoint_key_stops_the_boot_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("PRIVATE+KEY+nope\n")
    boot_refusal(tmp_path / "ws", "FOLDLINE_CHECKPOINT_KEY", bad)
