"""Free local ports for the servers this project starts (the HAProxy lab's listeners, the
servers tests start).

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the same range
every outgoing connection's local port is drawn from. Between choosing such a port and a
server binding it, an HTTP client can take it ("address already in use": a HAProxy lab
backend in CI, the test suite's servers under load). So ports are drawn at random from below
that range, where the kernel never puts an outgoing connection, and checked free.

Processes that draw at once can still draw the same port: one checks it free, the other
binds it first ("cannot bind socket" from a HAProxy lab in a parallel test run). Each such
process can be given a range of its own in ``ORCHESTRATOR_PORT_RANGE`` (``LOW-HIGH``, high
excluded; the test suite gives each xdist worker one).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
from pathlib import Path

__all__ = ["LOWEST", "RANGE_ENV", "free_port", "free_ports", "port_range"]

#: the lowest port drawn: above the well-known and most registered service ports
LOWEST = 10_000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: ``LOW-HIGH``: draw from this range only (high excluded)
RANGE_ENV = "ORCHESTRATOR_PORT_RANGE"


def _ephemeral_low() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def port_range() -> tuple[int, int]:
    """(low, high) to draw from: ``ORCHESTRATOR_PORT_RANGE`` when set, else from
    :data:`LOWEST` to the ephemeral range's start. ValueError naming the variable when it
    is malformed."""
    given = os.environ.get(RANGE_ENV, "").strip()
    if not given:
        return LOWEST, _ephemeral_low()
    low_s, sep, high_s = given.partition("-")
    try:
        low, high = int(low_s), int(high_s)
    except ValueError:
        low = high = -1
    if not sep or not 1024 <= low < high <= 65_536:
        raise ValueError(
            f"{RANGE_ENV}: expected LOW-HIGH with 1024 <= LOW < HIGH <= 65536, got {given!r}"
        )
    return low, high


def _bind(port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    return sock


def _draw(rng: random.SystemRandom, low: int, high: int) -> socket.socket:
    if high - low > 100:
        for _ in range(200):
            sock = _bind(rng.randrange(low, high))
            if sock is not None:
                return sock
    sock = _bind(0)
    if sock is None:
        raise OSError("no free port on 127.0.0.1")
    return sock


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free now on 127.0.0.1, outside the ephemeral range when there
    is room. Each stays bound until all are drawn, so none is handed out twice (bound and
    closed one at a time, ports repeated: HAProxy bound two PoP frontends to one port and
    answered one PoP's users with the other's routing)."""
    low, high = port_range()
    rng = random.SystemRandom()
    with contextlib.ExitStack() as held:
        return [
            int(held.enter_context(_draw(rng, low, high)).getsockname()[1]) for _ in range(count)
        ]


def free_port() -> int:
    """A port free now on 127.0.0.1, outside the ephemeral range when there is room."""
    return free_ports(1)[0]
