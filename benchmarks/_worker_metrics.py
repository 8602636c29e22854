"""The worker's own SDK metrics, scraped from its Prometheus endpoint, as a benchmark reads them.

The worker runs with ``ORCHESTRATOR_METRICS_ADDRESS`` set (orchestrator.temporal's
``metrics_runtime``: durations in seconds, counters ending in ``_total``). A scrape is
kept whole; what a period cost is the difference of two scrapes: workflow tasks
completed per second (the count of ``temporal_workflow_task_execution_latency``),
and quantiles of schedule-to-start latency from the histogram buckets that filled in
between (so a quantile is the upper bound of the bucket it falls in).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Scrape", "WORKFLOW_TASKS", "histogram_quantile", "rate", "scrape"]

#: one sample per workflow task the worker completed (its execution latency)
WORKFLOW_TASKS = "temporal_workflow_task_execution_latency"
WORKFLOW_S2S = "temporal_workflow_task_schedule_to_start_latency"
ACTIVITY_S2S = "temporal_activity_schedule_to_start_latency"
ACTIVITY_EXEC = "temporal_activity_execution_latency"


@dataclass
class Scrape:
    at: float
    #: histogram name -> (upper bound -> cumulative count), summed over labels
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)
    #: histogram name -> count, and counter name -> value, summed over labels
    counts: dict[str, float] = field(default_factory=dict)


def scrape(url: str) -> Scrape:
    text = httpx.get(url, timeout=10.0).text
    out = Scrape(at=time.monotonic())
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith("_bucket"):
                bound = float(sample.labels.get("le", "inf"))
                base = name.removesuffix("_bucket")
                series = out.buckets.setdefault(base, {})
                series[bound] = series.get(bound, 0.0) + sample.value
            elif name.endswith(("_count", "_total")):
                out.counts[name] = out.counts.get(name, 0.0) + sample.value
    return out


def count(s: Scrape, histogram: str) -> float:
    return s.counts.get(f"{histogram}_count", 0.0)


def rate(first: Scrape, last: Scrape, histogram: str = WORKFLOW_TASKS) -> float | None:
    """Samples of ``histogram`` per second between two scrapes."""
    seconds = last.at - first.at
    if seconds <= 0:
        return None
    return (count(last, histogram) - count(first, histogram)) / seconds


def histogram_quantile(first: Scrape, last: Scrape, histogram: str, q: float) -> float | None:
    """The ``q`` quantile (seconds) of what ``histogram`` saw between two scrapes: the upper
    bound of the bucket it falls in (None with no samples; inf past the last bound)."""
    after = last.buckets.get(histogram, {})
    before = first.buckets.get(histogram, {})
    bounds = sorted(after)
    if not bounds:
        return None
    cumulative = [after[b] - before.get(b, 0.0) for b in bounds]
    total = cumulative[-1]
    if total <= 0:
        return None
    wanted = q * total
    for bound, seen in zip(bounds, cumulative, strict=True):
        if seen >= wanted:
            return bound if not math.isinf(bound) else math.inf
    return math.inf
