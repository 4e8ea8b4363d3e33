"""Ports for the processes the tests start: never from the range outgoing connections draw on."""

from __future__ import annotations

import socket

from localcluster.ports import ephemeral_range, free_port


def test_a_free_port_lies_outside_the_ephemeral_range_and_can_be_bound():
    low, high = ephemeral_range()
    port = free_port()
    assert not low <= port <= high
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_port_is_handed_out_once_per_process():
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
