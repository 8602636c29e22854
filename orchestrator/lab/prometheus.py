"""Health in the Prometheus exposition format, so a real Prometheus can scrape the lab.

The numbers are the ones ``GET /v1/health`` returns for the default window; a
series with no samples is left out (Prometheus' way of saying "no data"),
never written as zero. ``prometheus_client`` renders them: one collector per
scrape, over the health report of that moment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from orchestrator.models import HealthReport, Metrics

__all__ = ["CONTENT_TYPE", "ExtraGauges", "render_metrics"]

#: the exposition format ``generate_latest`` writes
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: lab-only gauges: metric name -> (labels, value) series
ExtraGauges = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]

_FIELDS = (
    ("rps", "requests per second over the window"),
    ("utilization", "busy slot-time over capacity"),
    ("p50_ms", "median latency, ms"),
    ("p99_ms", "99th percentile latency, ms"),
    ("error_rate", "share of requests that failed"),
    ("samples", "requests in the window"),
)

_EXTRA_HELP = {
    "lab_routing_version": "version of the routing table",
    "lab_audit_entries": "mutations in the audit log",
    "lab_sessions_open": "sticky sessions open per region",
}


class _HealthCollector(Collector):
    def __init__(self, report: HealthReport, extra: ExtraGauges) -> None:
        self._report = report
        self._extra = extra

    def collect(self) -> Iterator[GaugeMetricFamily]:
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
            for field, help_text in _FIELDS:
                family = GaugeMetricFamily(
                    f"lab_{scope}_{field}",
                    f"{help_text} (window {report.window_s:g}s)",
                    labels=label_names,
                )
                for labels, metrics in entries:
                    value = getattr(metrics, field)
                    if value is None or (field != "samples" and metrics.samples == 0):
                        continue
                    family.add_metric(labels, float(value))
                yield family
        for name, series in self._extra.items():
            names = sorted({k for series_labels, _ in series for k in series_labels})
            family = GaugeMetricFamily(name, _EXTRA_HELP.get(name, name), labels=names)
            for series_labels, value in series:
                family.add_metric([series_labels.get(k, "") for k in names], value)
            yield family


def render_metrics(report: HealthReport, extra: ExtraGauges | None = None) -> str:
    """The exposition text of ``report`` and the lab-only gauges in ``extra``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_HealthCollector(report, extra or {}))
    return generate_latest(registry).decode()
