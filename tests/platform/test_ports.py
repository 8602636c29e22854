"""Ports for the servers tests start come from below the ephemeral range, where no outgoing
connection's local port can take one between the draw and the server's bind."""

from __future__ import annotations

import os
import random
import socket

import pytest

from orchestrator import ports
from tests.fixtures.ports import worker_range


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


class TestPortRange:
    """ORCHESTRATOR_PORT_RANGE narrows the draw (each xdist worker gets a disjoint slice);
    a malformed value is refused naming the variable."""

    def test_ports_come_from_the_given_range(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(ports.RANGE_ENV, "20000-20200")
        drawn = ports.free_ports(20)
        assert all(20_000 <= p < 20_200 for p in drawn), drawn
        assert len(set(drawn)) == 20

    @pytest.mark.parametrize("given", ["20000", "x-y", "30000-20000", "80-90", "20000-70000"])
    def test_a_malformed_range_is_refused(
        self, monkeypatch: pytest.MonkeyPatch, given: str
    ) -> None:
        monkeypatch.setenv(ports.RANGE_ENV, given)
        with pytest.raises(ValueError, match=ports.RANGE_ENV):
            ports.free_port()

    def test_workers_get_disjoint_slices(self) -> None:
        slices = [worker_range(f"gw{i}", 4, 10_000, 32_768) for i in range(4)]
        assert slices[0][0] == 10_000 and slices[-1][1] <= 32_768
        for (_, high), (low, _) in zip(slices, slices[1:], strict=False):
            assert high == low
        assert all(high - low > 5_000 for low, high in slices)

    def test_this_worker_draws_from_its_slice(self) -> None:
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        if worker is None:
            assert ports.port_range()[0] == ports.LOWEST  # one process: the whole range
            return
        count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
        mine = worker_range(worker, count, ports.LOWEST, ports._ephemeral_low())
        assert ports.port_range() == mine
