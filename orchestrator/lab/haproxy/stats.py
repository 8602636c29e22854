"""HAProxy's own counters over a window: what each region and PoP was asked and refused.

``show stat`` gives cumulative counters; :class:`StatsWindow` keeps timed samples of them
and answers differences over a window. Per region (the servers named as the region in every
service backend): requests = ``stot + econ`` and failures = ``hrsp_5xx + econ + eresp``,
since a request HAProxy refuses itself (its server's ``maxconn`` and queue full, or the
queue timed out) never reaches the server: it counts as a connection error there (``econ``)
and as a 5xx on the backend only. Per PoP: the frontend's ``req_tot`` and ``hrsp_5xx``.
Per service pool (``<service>/<region>``, :func:`parse_servers`): the one server's counts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Counters", "Counts", "StatsWindow", "parse_servers", "parse_stat"]


@dataclass(frozen=True)
class Counts:
    requests: int = 0
    failures: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.requests + other.requests, self.failures + other.failures)

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.requests - other.requests, self.failures - other.failures)


def _int(value: str) -> int:
    return int(value) if value.isdigit() else 0


def _rows(text: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        return []
    header = lines[0].removeprefix("# ").split(",")
    return [dict(zip(header, line.split(","), strict=False)) for line in lines[1:]]


def parse_servers(text: str, services: Iterable[str]) -> dict[str, Counts]:
    """``show stat`` CSV -> ``<service>/<region>`` -> the counts of that server."""
    backends = set(services)
    servers: dict[str, Counts] = {}
    for row in _rows(text):
        proxy, server = row.get("pxname", ""), row.get("svname", "")
        if proxy in backends and server not in ("FRONTEND", "BACKEND"):
            refused = _int(row.get("econ", ""))
            servers[f"{proxy}/{server}"] = Counts(
                _int(row.get("stot", "")) + refused,
                _int(row.get("hrsp_5xx", "")) + refused + _int(row.get("eresp", "")),
            )
    return servers


def parse_stat(
    text: str, services: Iterable[str], pops: Iterable[str]
) -> tuple[dict[str, Counts], dict[str, Counts]]:
    """``show stat`` CSV -> (region -> counts over ``services``' backends, PoP -> counts)."""
    regions: dict[str, Counts] = {}
    for key, counts in parse_servers(text, services).items():
        region = key.partition("/")[2]
        regions[region] = regions.get(region, Counts()) + counts
    frontends = set(pops)
    by_pop = {
        row["pxname"]: Counts(_int(row.get("req_tot", "")), _int(row.get("hrsp_5xx", "")))
        for row in _rows(text)
        if row.get("pxname") in frontends and row.get("svname") == "FRONTEND"
    }
    return regions, by_pop


class StatsWindow:
    """Timed samples of the counters, kept for ``retention_s``."""

    def __init__(self, retention_s: float) -> None:
        self.retention_s = retention_s
        self._samples: deque[tuple[float, dict[str, Counts]]] = deque()

    def add(self, at: float, counts: dict[str, Counts]) -> None:
        self._samples.append((at, counts))
        while self._samples and self._samples[0][0] < at - self.retention_s - 1.0:
            self._samples.popleft()

    def over(self, window_s: float) -> tuple[float, dict[str, Counts]]:
        """(seconds covered, key -> counts) between the newest sample and the oldest one
        no older than ``window_s`` before it; (0, {}) with fewer than two samples."""
        if len(self._samples) < 2:
            return 0.0, {}
        end_at, end = self._samples[-1]
        start_at, start = self._samples[0]
        for at, counts in self._samples:
            if at >= end_at - window_s:
                start_at, start = at, counts
                break
        span = end_at - start_at
        return span, {k: v - start.get(k, Counts()) for k, v in end.items()}


class Counters:
    """HAProxy's counters per region, PoP and service pool (``<service>/<region>``), each
    sampled into its own :class:`StatsWindow`."""

    def __init__(self, retention_s: float, services: Iterable[str], pops: Iterable[str]) -> None:
        self.services = list(services)
        self.pop_names = list(pops)
        self.regions = StatsWindow(retention_s)
        self.pops = StatsWindow(retention_s)
        self.pools = StatsWindow(retention_s)

    def add(self, at: float, text: str) -> None:
        """One ``show stat`` answer, read at ``at``."""
        regions, by_pop = parse_stat(text, self.services, self.pop_names)
        self.regions.add(at, regions)
        self.pops.add(at, by_pop)
        self.pools.add(at, parse_servers(text, self.services))
