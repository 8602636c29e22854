"""Sliding-window metrics from requests actually served.

Each finished request leaves one sample: when it finished, how long it took,
how long it held a slot, and whether it succeeded. A health read summarises
the samples inside its window; nothing is interpolated, so a key that served
nothing reports ``samples=0`` and ``None`` for every number.

Each key also keeps cumulative totals (requests, errors, a latency histogram in
seconds) for ``/metrics``: windowed numbers alone cannot be ``rate()``d.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Hashable

import numpy as np

__all__ = ["LATENCY_BUCKETS_S", "MetricsStore", "Summary", "Totals"]

#: upper bounds (seconds) of the latency histogram: fine where the lab's latencies and
#: the runbooks' p99 thresholds lie (tens to hundreds of ms), as ``histogram_quantile``
#: is only exact to a bucket
LATENCY_BUCKETS_S = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3,
    0.35, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0,
)  # fmt: skip


class Totals:
    """Since the lab started: requests, failed requests, and the latency of the
    successful ones (the same requests the windowed percentiles are taken over)."""

    __slots__ = ("buckets", "errors", "latency_sum_s", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.latency_sum_s = 0.0
        #: non-cumulative counts per bucket of LATENCY_BUCKETS_S, plus one for +Inf
        self.buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)

    def add(self, latency_ms: float, ok: bool) -> None:
        self.requests += 1
        if not ok:
            self.errors += 1
            return
        latency_s = latency_ms / 1000.0
        self.latency_sum_s += latency_s
        self.buckets[bisect_left(LATENCY_BUCKETS_S, latency_s)] += 1


class Summary:
    __slots__ = ("error_rate", "p50_ms", "p99_ms", "rps", "samples", "utilization")

    def __init__(self) -> None:
        self.rps: float | None = None
        self.utilization: float | None = None
        self.p50_ms: float | None = None
        self.p99_ms: float | None = None
        self.error_rate: float | None = None
        self.samples = 0

    def as_dict(self) -> dict[str, float | int | None]:
        return {name: getattr(self, name) for name in self.__slots__}


class MetricsStore:
    def __init__(self, retention_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.retention_s = retention_s
        self._clock = clock
        self.started = self.now()
        # key -> deque of (finished_at, latency_ms, busy_slot_s, ok)
        self._samples: dict[Hashable, deque[tuple[float, float, float, bool]]] = {}
        self._totals: dict[Hashable, Totals] = {}

    def now(self) -> float:
        return self._clock()

    def record(self, key: Hashable, latency_ms: float, busy_s: float, ok: bool) -> None:
        now = self.now()
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = deque()
        samples.append((now, latency_ms, busy_s, ok))
        self.totals(key).add(latency_ms, ok)
        horizon = now - self.retention_s
        while samples and samples[0][0] < horizon:
            samples.popleft()

    def totals(self, key: Hashable) -> Totals:
        """The key's totals, created at zero: a series exported before its first request
        lets ``rate()`` count that request."""
        totals = self._totals.get(key)
        if totals is None:
            totals = self._totals[key] = Totals()
        return totals

    def summary(self, key: Hashable, window_s: float, slots: float | None = None) -> Summary:
        """Numbers over the last ``window_s`` (or since start, if the lab is younger).

        ``slots`` turns busy slot-time into utilization; without it utilization stays None.
        """
        out = Summary()
        now = self.now()
        span = min(window_s, max(now - self.started, 1.0))
        samples = self._samples.get(key)
        if not samples:
            return out
        since = now - span
        recent: list[tuple[float, float, float, bool]] = []
        for sample in reversed(samples):
            if sample[0] < since:
                break
            recent.append(sample)
        if not recent:
            return out
        arr = np.asarray(recent, dtype=float)
        ok = arr[:, 3] > 0
        out.samples = len(recent)
        out.rps = out.samples / span
        out.error_rate = float(1.0 - ok.mean())
        if ok.any():
            latencies = arr[ok, 1]
            out.p50_ms = float(np.percentile(latencies, 50))
            out.p99_ms = float(np.percentile(latencies, 99))
        if slots is not None and slots > 0:
            out.utilization = float(min(arr[:, 2].sum() / (slots * span), 1.0))
        return out
