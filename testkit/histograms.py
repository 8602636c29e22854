"""How closely PromQL's ``histogram_quantile`` can agree with an exact quantile."""

from __future__ import annotations

import bisect

from orchestrator.lab.metrics import LATENCY_BUCKETS_S

__all__ = ["quantile_range_ms"]


def quantile_range_ms(exact_ms: float) -> tuple[float, float]:
    """Where ``histogram_quantile`` over the lab's latency buckets may put a quantile whose
    exact value (over nearly the same samples) is ``exact_ms``: its bucket or either
    neighbour. The estimate is exact only to a bucket, and near a bucket's edge one or two
    samples (two reads whose windows differ by a scrape) carry the quantile's rank across
    it, to anywhere in the next bucket: a hogged run read 509.8 ms from the lab and
    409.5 ms from PromQL over 853 and 851 samples, 0.3 ms more than one bucket's width."""
    i = bisect.bisect_left(LATENCY_BUCKETS_S, exact_ms / 1000)
    low = LATENCY_BUCKETS_S[i - 2] if i >= 2 else 0.0
    high = LATENCY_BUCKETS_S[i + 1] if i + 1 < len(LATENCY_BUCKETS_S) else float("inf")
    return 1000 * low, 1000 * high
