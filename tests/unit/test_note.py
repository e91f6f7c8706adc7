"""C2SP signed notes and checkpoints: keys round-trip, a note verifies with its key only, and
the spec's own example verifies (a vector this repository did not make)."""

from __future__ import annotations

import base64

import pytest

from engine.audit import note
from engine.errors import InvalidArgument

# The verifier key and signed note of the C2SP signed-note spec's example (c2sp.org/signed-note).
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = (
    "This is an example message.\n\n\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXpp"
    "zi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)


def test_note_spec_example_verifies_with_the_spec_key() -> None:
    verifier = note.parse_verifier(SPEC_VKEY)
    assert verifier.text() == SPEC_VKEY
    assert note.open_note(SPEC_NOTE, verifier) == "This is an example message.\n"
    with pytest.raises(InvalidArgument, match="does not verify"):
        note.open_note(SPEC_NOTE.replace("example message", "example massage"), verifier)


def test_note_keys_round_trip_through_their_text() -> None:
    for _ in range(50):  # base64 holds '+' now and then: names never do
        signer = note.generate_signer("example.com/log")
        assert note.parse_signer(signer.text()) == signer
        assert note.parse_verifier(signer.verifier.text()) == signer.verifier
    assert note.parse_signer(signer.text()) == signer
    assert note.parse_verifier(signer.verifier.text()) == signer.verifier
    assert signer.text().startswith("PRIVATE+KEY+example.com/log+")
    name, key_id, key = signer.verifier.text().split("+", 2)
    assert (name, len(key_id)) == ("example.com/log", 8)
    assert base64.b64decode(key)[:1] == b"\x01" and len(base64.b64decode(key)) == 33


@pytest.mark.parametrize(
    "text",
    [
        "",
        "example.com/foo+530d903a",
        "example.com/foo+530d903b+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",  # wrong id
        "example.com/bar+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",  # wrong name
        "example.com/foo+530d903a+AukyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",  # not 0x01
        "example.com/foo+530d903a+not base64",
        "bad name+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",
    ],
)
def test_note_verifier_refuses_a_malformed_key(text: str) -> None:
    with pytest.raises(InvalidArgument):
        note.parse_verifier(text)


def test_note_signer_refuses_a_verifier_key() -> None:
    with pytest.raises(InvalidArgument, match="PRIVATE"):
        note.parse_signer(SPEC_VKEY)


def test_note_sign_and_open_round_trip_and_refuse_the_wrong_key_or_a_changed_body() -> None:
    signer, other = note.generate_signer("a.example/log"), note.generate_signer("a.example/log")
    text = "a.example/log\n5\n" + base64.b64encode(bytes(32)).decode() + "\n"
    signed = note.sign_note(text, signer)
    assert signed.startswith(text + "\n\u2014 a.example/log ")
    assert note.open_note(signed, signer.verifier) == text
    with pytest.raises(InvalidArgument, match="no signature"):
        note.open_note(signed, other.verifier)  # same name, another key: ignored, none left
    with pytest.raises(InvalidArgument, match="does not verify"):
        note.open_note(signed.replace("\n5\n", "\n6\n"), signer.verifier)
    both = note.sign_note(text, other, signer)
    assert note.open_note(both, signer.verifier) == text  # an unknown signature is ignored
    for broken in (text, signed.replace("\u2014", "-"), signed[:-1], signed.replace("\n5", "\t5")):
        with pytest.raises(InvalidArgument):
            note.open_note(broken, signer.verifier)
    with pytest.raises(InvalidArgument):
        note.sign_note("no newline", signer)


def test_note_checkpoint_text_round_trips_and_refuses_malformed_ones() -> None:
    head = note.TreeHead("example.com/log", 20852163, bytes(range(32)))
    text = head.text()
    assert text == f"example.com/log\n20852163\n{base64.b64encode(bytes(range(32))).decode()}\n"
    assert note.parse_checkpoint(text) == head
    assert note.parse_checkpoint(text + "ext\n").extensions == ("ext",)
    root = base64.b64encode(bytes(32)).decode()
    for origin in ("", "two\nlines"):
        with pytest.raises(InvalidArgument):
            note.TreeHead(origin, 1, bytes(32)).text()
    for bad in (
        f"o\n01\n{root}\n",
        f"o\n-1\n{root}\n",
        f"o\n1\n{root[:-4]}\n",
        f"\n1\n{root}\n",
        "o\n1\n",
        f"o\n1\n{root}",
        f"o\n1\n{root}\n\n",
    ):
        with pytest.raises(InvalidArgument):
            note.parse_checkpoint(bad)
