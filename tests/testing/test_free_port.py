"""Ports the test fixtures choose for processes that bind them later."""

from __future__ import annotations

import socket

from grete.testing.common import _ephemeral_range, free_port, free_ports


def test_a_chosen_port_is_outside_the_range_outgoing_connections_take() -> None:
    # An outgoing connection's local port comes from the ephemeral range; a listener pre-chosen in
    # it could be taken by one before it binds (the "address already in use" of a cluster fixture).
    low, high = _ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert all(not low <= port <= high for port in ports)
    assert len(set(ports)) == len(ports)  # never handed out twice in one process
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # and free


def test_consecutive_ports_are_free_and_not_handed_out_again() -> None:
    first = free_ports(3)
    assert not {first, first + 1, first + 2} & {free_port() for _ in range(50)}
