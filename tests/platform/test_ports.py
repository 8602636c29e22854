"""Ports for the servers tests start come from below the ephemeral range, where no outgoing
connection's local port can take one between the draw and the server's bind."""

from __future__ import annotations

import random
import socket

import pytest

from orchestrator import ports


class TestFreePort:
    """free_port draws below the ephemeral range and hands out a port that binds."""

    def test_ports_are_below_the_ephemeral_range_and_bind(self) -> None:
        low = ports._ephemeral_low()
        drawn = {ports.free_port() for _ in range(50)}
        assert all(ports.LOWEST <= p < low for p in drawn), sorted(drawn)
        assert len(drawn) > 40  # drawn at random, not one port again and again
        for port in list(drawn)[:5]:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", port))

    def test_a_taken_port_is_drawn_again(self, monkeypatch: pytest.MonkeyPatch) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
            held.bind(("127.0.0.1", ports.free_port()))
            taken = held.getsockname()[1]
            spare = ports.free_port()
            draws = iter([taken, spare])
            monkeypatch.setattr(random.SystemRandom, "randrange", lambda *_: next(draws))
            assert ports.free_port() == spare
