"""Test servers' ports under pytest-xdist: each worker picks from a share of its own."""

from __future__ import annotations

from tests.support.server import _worker_ports


def test_worker_ports_are_disjoint_shares_that_cover_the_range() -> None:
    ports = range(10000, 10011)
    shares = [
        set(
            _worker_ports(
                ports, {"PYTEST_XDIST_WORKER": f"gw{i}", "PYTEST_XDIST_WORKER_COUNT": "3"}
            )
        )
        for i in range(3)
    ]
    assert all(shares)
    assert not (shares[0] & shares[1] or shares[0] & shares[2] or shares[1] & shares[2])
    assert set.union(*shares) == set(ports)


def test_worker_ports_are_the_whole_range_outside_xdist() -> None:
    assert _worker_ports(range(10000, 10011), {}) == range(10000, 10011)
