"""Sliding-window metrics from requests actually served.

Each finished request leaves one sample: when it finished, how long it took,
how long it held a slot, and whether it succeeded. A health read summarises
the samples inside its window; nothing is interpolated, so a key that served
nothing reports ``samples=0`` and ``None`` for every number.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable

import numpy as np

__all__ = ["MetricsStore", "Summary"]


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

    def now(self) -> float:
        return self._clock()

    def record(self, key: Hashable, latency_ms: float, busy_s: float, ok: bool) -> None:
        now = self.now()
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = deque()
        samples.append((now, latency_ms, busy_s, ok))
        horizon = now - self.retention_s
        while samples and samples[0][0] < horizon:
            samples.popleft()

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
