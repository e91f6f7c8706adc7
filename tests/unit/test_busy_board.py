"""The server's own ``/ping`` stamp (the busy board, ADR 0031) moves only when busy turns to
idle or back: more work coming and going while busy, or an extra leave while idle, leaves it
where it was (AgentCore reads a moving stamp as activity)."""

from __future__ import annotations

from adapters.services.busy import BusyBoard


def test_busy_board_stamp_moves_only_when_the_state_changes() -> None:
    now = [1000.0]
    board = BusyBoard(clock=lambda: now[0])
    assert board.state() == (False, 1000.0)
    now[0] = 1100.0
    board.leave()  # nothing in flight: still idle
    assert board.state() == (False, 1000.0)
    now[0] = 1200.0
    board.enter()
    assert board.state() == (True, 1200.0)
    for step in (1300.0, 1400.0):  # a second run and a notify hook come and go
        now[0] = step
        board.enter()
        board.leave()
        assert board.state() == (True, 1200.0)
    now[0] = 1500.0
    board.leave()
    assert board.state() == (False, 1500.0)
    now[0] = 1450.0  # a clock stepped back
    board.enter()
    assert board.state() == (True, 1500.0)  # a change, never stamped earlier than the last
