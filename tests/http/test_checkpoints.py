"""The holder's signed checkpoints (``adapters.services.checkpoints``, ADR 0040) in process, on a
fixed clock: when one is due (N events, T seconds), the event it records, the note kept beside the
anchor, the refusal of a tree that does not extend the last one, and the open routes."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import falcon.testing
import pytest

from adapters.services.checkpoints import Checkpointer
from adapters.services.runtime import Runtime
from adapters.settings.config import ConfigError, load_config
from engine import merkle
from engine.audit.note import TreeHead, generate_signer, open_note, parse_checkpoint, sign_note
from engine.clock import FixedClock
from engine.domain import commands as c
from engine.domain.lease import LeaseCheckpointSigned
from engine.merkle.nodes import BLOCK, LOWEST_LEVEL
from tests.http.conftest import MakeClient

SIGNER = generate_signer("example.com/foldline-unit")
NOW = FixedClock().now()


def _head(size: int) -> TreeHead:
    return TreeHead(SIGNER.name, size, b"\0" * 32)


def _checkpointer(tmp_path: Path, every: int = 10, interval_s: float = 60) -> Checkpointer:
    return Checkpointer(SIGNER, every, interval_s, tmp_path / "cp")


def test_checkpointer_is_due_at_once_for_a_first_checkpoint_of_a_log_with_events(
    tmp_path: Path,
) -> None:
    assert not _checkpointer(tmp_path).is_due(0, None, NOW)
    assert _checkpointer(tmp_path).is_due(1, None, NOW)


def test_checkpointer_is_due_after_every_n_events(tmp_path: Path) -> None:
    checkpointer = _checkpointer(tmp_path, every=10)
    last = _head(20)
    assert not checkpointer.is_due(21, last, NOW)  # the first look starts the interval
    assert not checkpointer.is_due(29, last, NOW)
    assert checkpointer.is_due(30, last, NOW)


def test_checkpointer_is_due_after_t_seconds_only_when_the_log_grew(tmp_path: Path) -> None:
    clock = FixedClock()
    checkpointer = _checkpointer(tmp_path, every=1000, interval_s=60)
    last = _head(20)
    assert not checkpointer.is_due(22, last, clock.now())
    clock.advance(59)
    assert not checkpointer.is_due(22, last, clock.now())
    clock.advance(1)
    assert checkpointer.is_due(22, last, clock.now())
    assert not checkpointer.is_due(21, last, clock.now())  # only its own event since


@pytest.fixture
def holder(make_client: MakeClient, tmp_path: Path) -> tuple[Any, Runtime, FixedClock]:
    clock = FixedClock()
    client, runtime = make_client(
        clock=clock,
        state_dir=tmp_path / "state",
        checkpoint_key=SIGNER,
        checkpoint_every=5,
        checkpoint_interval_s=60.0,
        lease_renew_s=3600.0,  # no renewal thread signs meanwhile: the test calls it
        lease_stale_s=7200.0,
    )
    runtime.ensure_lease()
    return client, runtime, clock


def _grow(runtime: Runtime, events: int) -> None:
    for _ in range(events):
        runtime.engine.handle(c.RenewLease(holder=runtime.holder, epoch=runtime.tenure.epoch or 0))


def _signed(runtime: Runtime) -> list[Any]:
    stream = runtime.engine.log.read_stream("lease:workspace")
    return [e for e in stream if isinstance(e.event, LeaseCheckpointSigned)]


def test_holder_records_the_checkpoint_and_keeps_its_note_beside_the_anchor(
    holder: tuple[Any, Runtime, FixedClock],
) -> None:
    _, runtime, _ = holder
    head = runtime.engine.log.head()
    runtime.sign_checkpoint()
    [recorded] = _signed(runtime)
    event = recorded.event
    assert (event.origin, event.size, recorded.position) == (SIGNER.name, head, head + 1)
    assert runtime.checkpoint_path.parent == runtime.anchor_path.parent  # type: ignore[union-attr]
    assert runtime.checkpoint_path.read_text() == event.note
    signed = parse_checkpoint(open_note(event.note, SIGNER.verifier))
    assert (signed.size, base64.b64encode(signed.root).decode()) == (head, event.root)
    runtime.sign_checkpoint()  # nothing new but its own event: not due
    assert len(_signed(runtime)) == 1


def test_holder_signs_again_after_n_events_or_t_seconds(
    holder: tuple[Any, Runtime, FixedClock],
) -> None:
    _, runtime, clock = holder
    runtime.sign_checkpoint()
    _grow(runtime, 3)
    runtime.sign_checkpoint()
    assert len(_signed(runtime)) == 1  # 4 events since (its own too): fewer than 5
    _grow(runtime, 1)
    runtime.sign_checkpoint()
    assert len(_signed(runtime)) == 2
    _grow(runtime, 1)
    clock.advance(60)
    runtime.sign_checkpoint()
    first, second, third = (e.event for e in _signed(runtime))
    assert first.size < second.size < third.size
    old = parse_checkpoint(open_note(first.note, SIGNER.verifier))
    new = parse_checkpoint(open_note(third.note, SIGNER.verifier))
    assert (new.size, old.size) == (third.size, first.size)


def test_holder_refuses_a_tree_that_does_not_extend_the_last_checkpoint(
    holder: tuple[Any, Runtime, FixedClock], caplog: pytest.LogCaptureFixture
) -> None:
    _, runtime, _ = holder
    forged = sign_note(_head(2).text(), SIGNER)  # signed by the key, but not this log's tree
    runtime.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
    runtime.checkpoint_path.write_text(forged)
    _grow(runtime, 10)
    with caplog.at_level(logging.ERROR, "foldline.checkpoints"):
        runtime.sign_checkpoint()
    assert "does not extend the signed checkpoint of 2 events" in caplog.text
    assert _signed(runtime) == [] and runtime.checkpoint_path.read_text() == forged


def test_checkpoint_and_proofs_are_open_and_default_to_the_checkpoint(
    holder: tuple[Any, Runtime, FixedClock],
) -> None:
    client, runtime, _ = holder
    bare = falcon.testing.TestClient(client.app)  # no token at all
    answer = bare.simulate_get("/v1/checkpoint")
    assert answer.status_code == 404 and answer.json["error"]["code"] == "not_found"
    runtime.sign_checkpoint()
    _grow(runtime, 2)
    answer = bare.simulate_get("/v1/checkpoint")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    signed = parse_checkpoint(open_note(answer.text, SIGNER.verifier))
    proof = bare.simulate_get("/v1/proofs/inclusion?position=1").json
    assert proof["size"] == signed.size < runtime.engine.log.head()
    nodes = [base64.b64decode(node) for node in proof["proof"]]
    leaf = base64.b64decode(proof["leaf_hash"])
    assert merkle.verify_inclusion(leaf, 0, signed.size, nodes, signed.root)
    head = runtime.engine.log.head()
    answer = client.simulate_get(f"/v1/proofs/consistency?old={signed.size}&new={head}")
    assert answer.json["new_size"] == head
    for query, status, code in (
        ("old=1&new=x", 400, "invalid_argument"),
        ("new=2", 400, "invalid_argument"),  # old is required
        ("old=0", 404, "out_of_range"),
        (f"old=1&new={head + 1}", 404, "out_of_range"),
        (f"old={head}&new=2", 404, "out_of_range"),
    ):
        answer = bare.simulate_get(f"/v1/proofs/consistency?{query}")
        assert (answer.status_code, answer.json["error"]["code"]) == (status, code), query


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"FOLDLINE_CHECKPOINT_EVERY": "0"}, "FOLDLINE_CHECKPOINT_EVERY"),
        ({"FOLDLINE_CHECKPOINT_INTERVAL_S": "soon"}, "FOLDLINE_CHECKPOINT_INTERVAL_S"),
        ({"FOLDLINE_CHECKPOINT_KEY": "/nonexistent/key"}, "cannot be read"),
        ({"FOLDLINE_CHECKPOINT_KEY": "{key}"}, "signer key"),
    ],
)
def test_config_refuses_bad_checkpoint_settings(
    workspace: Path, tmp_path: Path, env: dict[str, str], said: str
) -> None:
    key = tmp_path / "verifier.key"
    key.write_text(SIGNER.verifier.text() + "\n")  # a verifier key, not a signer
    env = {name: value.format(key=key) for name, value in env.items()}
    with pytest.raises(ConfigError, match=said):
        load_config(env, workspace=str(workspace))


def test_config_reads_the_checkpoint_key_and_settings(workspace: Path, tmp_path: Path) -> None:
    key = tmp_path / "signer.key"
    key.write_text(SIGNER.text() + "\n")
    env = {
        "FOLDLINE_CHECKPOINT_KEY": str(key),
        "FOLDLINE_CHECKPOINT_EVERY": "7",
        "FOLDLINE_CHECKPOINT_INTERVAL_S": "2.5",
    }
    config = load_config(env, workspace=str(workspace))
    expected = (SIGNER, 7, 2.5)
    assert (
        config.checkpoint_key,
        config.checkpoint_every,
        config.checkpoint_interval_s,
    ) == expected


def test_holder_logs_a_failed_signing_and_keeps_renewing(
    holder: tuple[Any, Runtime, FixedClock],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, runtime, _ = holder

    def broken(*args: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Checkpointer, "sign", broken)
    with caplog.at_level(logging.ERROR, "foldline.runtime"):
        runtime.sign_checkpoint()  # raises nothing: the renewal goes on
    assert "no checkpoint signed" in caplog.text and "disk on fire" in caplog.text


def test_holder_without_a_key_stores_the_tree_nodes_at_each_renewal(
    make_client: MakeClient, tmp_path: Path
) -> None:
    _, runtime = make_client(
        clock=FixedClock(),
        state_dir=tmp_path / "state",
        lease_renew_s=3600.0,  # no renewal thread meanwhile: the test runs what one calls
        lease_stale_s=7200.0,
    )
    runtime.ensure_lease()
    _grow(runtime, 2 * BLOCK)
    runtime.tenure._on_renewed()  # what each renewal calls, key or no key
    head = runtime.engine.log.head()
    rows = runtime.engine.log.connection().execute("SELECT level, idx FROM tree_nodes")
    blocks = head // BLOCK
    assert blocks >= 2
    assert {tuple(row) for row in rows} == {(LOWEST_LEVEL, i) for i in range(blocks)} | {
        (LOWEST_LEVEL + 1, i) for i in range(blocks // 2)
    }
    assert not runtime.checkpoint_path.exists()  # no key: nodes, but nothing signed
