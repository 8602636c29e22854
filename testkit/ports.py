"""Free local ports for servers that tests start.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the same range
every outgoing connection's local port is drawn from. Between choosing such a port and a
server binding it, one of the suite's many HTTP clients can take it ("port ... already in
use", seen under load). So ports are drawn at random from below that range, where the
kernel never puts an outgoing connection, and checked free.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

#: the lowest port drawn: above the well-known and most registered service ports
LOWEST = 10_000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port free now on 127.0.0.1, outside the ephemeral range when there is room."""
    high = _ephemeral_low()
    rng = random.SystemRandom()
    if high - LOWEST > 1_000:
        for _ in range(200):
            port = rng.randrange(LOWEST, high)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
