"""/metrics is the health report in the Prometheus exposition format, written by
prometheus_client: every number of the report, no series for what has no samples."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.lab.metrics import MetricsStore
from orchestrator.lab.prometheus import render_metrics
from orchestrator.models import HealthReport, PopHealth, RegionHealth, ServiceHealth

REPORT = HealthReport(
    window_s=10,
    observed_at=datetime(2026, 1, 1, tzinfo=UTC),
    regions=[
        RegionHealth(
            region='us-"east"',
            rps=12.5,
            utilization=0.5,
            p50_ms=20,
            p99_ms=80,
            error_rate=0.01,
            samples=125,
        ),
        RegionHealth(region="eu-west", samples=0),
    ],
    services=[ServiceHealth(region="eu-west", service="kv", rps=3.0, utilization=0.1, samples=30)],
    pops=[PopHealth(pop="nyc", rps=12.5, p50_ms=25, p99_ms=90, error_rate=0.0, samples=125)],
)


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class TestExposition:
    """Each health number is a gauge labelled by its scope; a region with no samples has
    only its zero sample count; the lab's own gauges follow, with their labels."""

    def test_numbers_and_labels(self) -> None:
        series = scrape(render_metrics(REPORT))
        east = (("region", 'us-"east"'),)
        assert series[("lab_region_rps", east)] == 12.5
        assert series[("lab_region_latency_p99_seconds", east)] == 0.08
        assert series[("lab_region_samples", east)] == 125
        assert (
            series[("lab_service_utilization", (("region", "eu-west"), ("service", "kv")))] == 0.1
        )
        assert series[("lab_pop_latency_p50_seconds", (("pop", "nyc"),))] == 0.025

    def test_no_samples_no_numbers(self) -> None:
        west = [k for k in scrape(render_metrics(REPORT)) if k[1] == (("region", "eu-west"),)]
        assert west == [("lab_region_samples", (("region", "eu-west"),))]

    def test_lab_gauges(self) -> None:
        extra = {
            "lab_routing_version": [({}, 7.0)],
            "lab_sessions_open": [({"region": "us-east"}, 3.0), ({"region": "eu-west"}, 0.0)],
        }
        series = scrape(render_metrics(REPORT, extra))
        assert series[("lab_routing_version", ())] == 7
        assert series[("lab_sessions_open", (("region", "us-east"),))] == 3
        assert series[("lab_sessions_open", (("region", "eu-west"),))] == 0


class TestCumulative:
    """Live-mode totals: counters of requests and errors and a latency histogram in
    seconds over the successful requests, exported at zero before the first request."""

    def test_counters_and_histogram(self) -> None:
        store = MetricsStore(retention_s=60)
        for latency_ms in (4.0, 40.0, 400.0):
            store.record(("region", "eu"), latency_ms, 0.0, True)
        store.record(("region", "eu"), 0.0, 0.0, False)
        totals = [
            ("region", {"region": "eu"}, store.totals(("region", "eu"))),
            ("region", {"region": "us"}, store.totals(("region", "us"))),
        ]
        series = scrape(render_metrics(REPORT, totals=totals))
        eu, us = (("region", "eu"),), (("region", "us"),)
        assert series[("lab_region_requests_total", eu)] == 4
        assert series[("lab_region_request_errors_total", eu)] == 1
        assert series[("lab_region_requests_total", us)] == 0
        buckets = "lab_region_request_duration_seconds_bucket"
        assert series[(buckets, (("le", "0.005"), ("region", "eu")))] == 1
        assert series[(buckets, (("le", "0.05"), ("region", "eu")))] == 2
        assert series[(buckets, (("le", "+Inf"), ("region", "eu")))] == 3
        assert series[("lab_region_request_duration_seconds_count", eu)] == 3
        assert abs(series[("lab_region_request_duration_seconds_sum", eu)] - 0.444) < 1e-9
