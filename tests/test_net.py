"""The loopback ports tests give the servers they start."""

from __future__ import annotations

import socket

from tests.net import free_ports


def test_ports_picked_together_are_different_and_free() -> None:
    for _ in range(20):
        ports = free_ports(3)
        assert len(set(ports)) == 3, ports
        with socket.socket() as one, socket.socket() as two, socket.socket() as three:
            for sock, port in zip((one, two, three), ports, strict=True):
                sock.bind(("127.0.0.1", port))  # free again once picked: a server can take it
