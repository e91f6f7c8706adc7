"""``chain.links_hold`` (every link of a chunk checked by C code) against ``chain.link``."""

from __future__ import annotations

from typing import Any

from engine import chain


def _rows(n: int) -> list[tuple[Any, ...]]:
    """n chained rows, each followed by the hash stored before it, as ``verify`` reads them."""
    rows, previous = [], chain.GENESIS
    for position in range(1, n + 1):
        content = (
            position,
            f"door:d{position % 3}",
            position,
            "door.opened",
            "2026-12-01T00:00:00.000000Z",
            position % 2,
            None if position % 2 else f"c{position}",
            'open "wide" \u00e9\n',
            b'{"type":"door.opened"}',
        )
        digest = chain.link(previous, *content)
        rows.append((*content, digest, previous))
        previous = digest
    return rows


def test_chain_links_hold_for_rows_that_link() -> None:
    assert chain.links_hold(_rows(50))
    assert chain.links_hold([])


def test_chain_links_hold_fails_on_any_edit_a_missing_previous_or_a_wrong_type() -> None:
    rows = _rows(20)
    for at, value in [(1, "door:other"), (7, "closed"), (8, b"{}"), (9, b"\x00" * 32)]:
        edited = list(rows)
        edited[13] = (*rows[13][:at], value, *rows[13][at + 1 :])
        assert not chain.links_hold(edited), at
    missing = list(rows)
    missing[4] = (*rows[4][:10], None)  # a gap: no hash stored before the row
    assert not chain.links_hold(missing)
    text = list(rows)
    text[2] = (*rows[2][:8], rows[2][8].decode(), *rows[2][9:])  # a payload stored as TEXT
    assert not chain.links_hold(text)
