"""HAProxy as a benchmark sees it: its admin socket's counters and its live routing map.

For benchmarks/drain_haproxy.py: where 5xx came from (HAProxy refusing, ``econ``, or the
backend answering 5xx), how long a server slot is really held, and when the map changed
after a gate passed.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from orchestrator.contracts.runbook import RunbookReport
from orchestrator.exceptions import FleetUnavailable
from orchestrator.fleet.haproxy.runtime import RuntimeApi

MAP_POLL_S = 0.1


def _runtime(directory: Path) -> RuntimeApi:
    return RuntimeApi(str(directory / "admin.sock"), timeout_s=5.0)


#: per region server: requests, refused by HAProxy (queue full or timed out: ``econ``),
#: 5xx answered by the backend itself; then as they stand (not counters): the longest queue
#: since start, and the mean queue and response times (ms) of the last 1,024 requests, which
#: show how long a slot is really held against the pool's modelled service time
COUNTERS = ("stot", "econ", "hrsp_5xx", "eresp")
GAUGES = ("qmax", "qtime", "rtime")


async def refusals(directory: Path) -> dict[str, dict[str, int]]:
    """``service/region`` -> HAProxy's counters since start (where a 5xx came from)."""
    out = {}
    for row in await _runtime(directory).stats():
        if row.get("pxname") in ("web", "sessions") and row.get("svname") not in (
            "FRONTEND",
            "BACKEND",
        ):
            key = f"{row['pxname']}/{row['svname']}"
            out[key] = {
                c: int(row[c]) if row.get(c, "").isdigit() else 0 for c in COUNTERS + GAUGES
            }
    return out


def counters_between(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The counters' growth, the gauges as they stand after."""
    return {
        k: {c: v[c] - before.get(k, {}).get(c, 0) if c in COUNTERS else v[c] for c in v}
        for k, v in after.items()
    }


class MapWatch:
    """The drained region's bucket count in HAProxy's live map, with when it changed."""

    def __init__(self, directory: Path, region: str) -> None:
        self.runtime = _runtime(directory)
        self.map = str(directory / "routing.map")
        self.region = region
        self.changes: list[tuple[float, int]] = []
        self._pending: tuple[float, int] | None = None
        self._stop = threading.Event()
        # its own thread and event loop: the benchmark's loop is busy running the drain
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def count(self) -> int:
        # lines are "<ref> <pop>/<bucket> <region>"; version keys hold other values
        text = await self.runtime.command(f"show map {self.map}")
        return sum(1 for line in text.splitlines() if line.endswith(f" {self.region}"))

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                count = await self.count()
            except FleetUnavailable:
                count = -1
            # A reading counts once the next one agrees: a dump taken while the adapter
            # rewrites the map can show a passing state (a first trial saw 0, then 1,408).
            now = time.time()
            confirmed = self._pending is not None and self._pending[1] == count
            if confirmed and (not self.changes or self.changes[-1][1] != count):
                assert self._pending is not None
                self.changes.append(self._pending)
            if self._pending is None or self._pending[1] != count:
                self._pending = (now, count)
            await asyncio.sleep(MAP_POLL_S)

    def __enter__(self) -> MapWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def gate_to_decision(report: RunbookReport, changes: list[tuple[float, int]]) -> dict[str, Any]:
    """Each passing gate reading that a step followed -> the next change of the map."""
    # the gate after step s decides step s + 1; the last step's gate decides nothing
    readings = [g for t in report.tasks for g in t.gates if g.passed and 0 < g.step < t.steps]
    delays = []
    for reading in readings:
        at = reading.at.timestamp()
        after = [t for t, _ in changes if t > at]
        if after:
            delays.append(round(after[0] - at, 3))
    return {
        "delays_s": delays,
        "median_s": statistics.median(delays) if delays else None,
        "max_s": max(delays) if delays else None,
        "map_poll_s": MAP_POLL_S,
    }


def occupancy(
    counters: dict[str, dict[str, int]], seconds: float, slots: dict[str, int]
) -> dict[str, float]:
    """``service/region`` -> the share of its ``maxconn`` slots held on average: requests per
    second x HAProxy's mean response time / slots. The lab's own utilization counts only the
    modelled service time; a slot is held for the whole response (dependencies, event-loop
    lag too). ``rtime`` is the mean of the last 1,024 requests: the window's end, not all of it.
    """
    out = {}
    for key, c in counters.items():
        service = key.split("/")[0]
        if seconds > 0 and service in slots:
            out[key] = round(c["stot"] / seconds * c["rtime"] / 1000.0 / slots[service], 3)
    return out
