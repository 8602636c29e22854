"""Health in the Prometheus exposition format, so a real Prometheus can scrape the lab.

The numbers are the ones ``GET /v1/health`` returns for the default window; a
series with no samples is left out (Prometheus' way of saying "no data"),
never written as zero. ``prometheus_client`` renders them: one collector per
scrape, over the health report of that moment.

Windowed gauges (``lab_<scope>_rps``, ``lab_<scope>_latency_p99_seconds``, ...)
answer "how is it now" without PromQL; in live mode the lab also exports, per
region, service (``region``, ``service``) and PoP, cumulative counters
``lab_<scope>_requests_total`` and ``lab_<scope>_request_errors_total`` and the
histogram ``lab_<scope>_request_duration_seconds`` (successful requests), so
``rate()`` and ``histogram_quantile()`` work as on any service.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from orchestrator.lab.metrics import LATENCY_BUCKETS_S, Totals
from orchestrator.models import HealthReport, Metrics

__all__ = ["CONTENT_TYPE", "ExtraGauges", "ScopeTotals", "render_metrics"]

#: the exposition format ``generate_latest`` writes
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: lab-only gauges: metric name -> (labels, value) series
ExtraGauges = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]
#: cumulative totals: (scope, labels, totals), scope one of region, service, pop
ScopeTotals = Sequence[tuple[str, Mapping[str, str], Totals]]

#: (report field, metric suffix, help, divisor): latencies are exported in seconds
_FIELDS = (
    ("rps", "rps", "requests per second over the window", 1.0),
    ("utilization", "utilization", "busy slot-time over capacity", 1.0),
    ("p50_ms", "latency_p50_seconds", "median latency of successful requests", 1000.0),
    ("p99_ms", "latency_p99_seconds", "99th percentile latency of successful requests", 1000.0),
    ("error_rate", "error_rate", "share of requests that failed", 1.0),
    ("samples", "samples", "requests in the window", 1.0),
)
_SCOPE_LABELS = {"region": ["region"], "service": ["region", "service"], "pop": ["pop"]}

_EXTRA_HELP = {
    "lab_routing_version": "version of the routing table",
    "lab_audit_entries": "mutations in the audit log",
    "lab_sessions_open": "sticky sessions open per region",
    "lab_building_power": "1 while the building has power, 0 after a power loss",
}


class _HealthCollector(Collector):
    def __init__(self, report: HealthReport, extra: ExtraGauges, totals: ScopeTotals) -> None:
        self._report = report
        self._extra = extra
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        report = self._report
        scopes: list[tuple[str, list[str], list[tuple[list[str], Metrics]]]] = [
            ("region", ["region"], [([r.region], r) for r in report.regions]),
            (
                "service",
                ["region", "service"],
                [([s.region, s.service], s) for s in report.services],
            ),
            ("pop", ["pop"], [([p.pop], p) for p in report.pops]),
        ]
        for scope, label_names, entries in scopes:
            for field, suffix, help_text, divisor in _FIELDS:
                family = GaugeMetricFamily(
                    f"lab_{scope}_{suffix}",
                    f"{help_text} (window {report.window_s:g}s)",
                    labels=label_names,
                )
                for labels, metrics in entries:
                    value = getattr(metrics, field)
                    if value is None or (field != "samples" and metrics.samples == 0):
                        continue
                    family.add_metric(labels, float(value) / divisor)
                yield family
        yield from _cumulative(self._totals)
        for name, series in self._extra.items():
            names = sorted({k for series_labels, _ in series for k in series_labels})
            family = GaugeMetricFamily(name, _EXTRA_HELP.get(name, name), labels=names)
            for series_labels, value in series:
                family.add_metric([series_labels.get(k, "") for k in names], value)
            yield family


def _cumulative(totals: ScopeTotals) -> Iterator[Metric]:
    for scope, label_names in _SCOPE_LABELS.items():
        entries = [(labels, t) for s, labels, t in totals if s == scope]
        if not entries:
            continue
        requests = CounterMetricFamily(
            f"lab_{scope}_requests",
            f"requests served, by {scope}, since the lab started",
            labels=label_names,
        )
        errors = CounterMetricFamily(
            f"lab_{scope}_request_errors",
            f"requests that failed, by {scope}, since the lab started",
            labels=label_names,
        )
        latency = HistogramMetricFamily(
            f"lab_{scope}_request_duration_seconds",
            f"latency of successful requests, by {scope}",
            labels=label_names,
        )
        for labels, t in entries:
            values = [labels[k] for k in label_names]
            requests.add_metric(values, t.requests)
            errors.add_metric(values, t.errors)
            cumulative, buckets = 0, []
            for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), t.buckets, strict=True):
                cumulative += count
                buckets.append((_le(bound), cumulative))
            latency.add_metric(values, buckets, t.latency_sum_s)
        yield from (requests, errors, latency)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def render_metrics(
    report: HealthReport, extra: ExtraGauges | None = None, totals: ScopeTotals = ()
) -> str:
    """The exposition text of ``report``, the lab-only gauges in ``extra`` and the
    cumulative ``totals`` (live mode)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_HealthCollector(report, extra or {}, totals))
    return generate_latest(registry).decode()
