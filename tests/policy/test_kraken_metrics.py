"""Kraken health metrics: band definitions, their validation and evaluation on health reports."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.models import HealthReport, RegionHealth, ServiceHealth
from orchestrator.policy.health_metrics import (
    Band,
    HealthMetric,
    MetricEntity,
    default_lab_metrics,
    evaluate_health,
    evaluate_metric,
)

NOW = datetime(2024, 5, 1, tzinfo=UTC)


def _p99_metric(**extra: Any) -> HealthMetric:
    return HealthMetric.model_validate(
        {
            "entity": {"region": "east"},
            "key": "p99_ms",
            "bands": {
                "bold": [0, 60],
                "moderate": [60, 80],
                "cautious": [80, 100],
                "nomore": [100, 130],
                "backoff": [130, None],
            },
            **extra,
        }
    )


def _report(window_s: float = 240.0, **values: Any) -> HealthReport:
    samples = values.pop("samples", 1000)
    return HealthReport(
        window_s=window_s,
        observed_at=NOW,
        regions=[RegionHealth(region="east", samples=samples, **values)],
    )


class TestBandOfValue:
    """A value falls in the band whose [low, high) range holds it, for either direction."""

    @pytest.mark.parametrize(
        ("value", "band"),
        [
            (10.0, Band.BOLD),
            (59.9, Band.BOLD),
            (60.0, Band.MODERATE),
            (99.9, Band.CAUTIOUS),
            (100.0, Band.NOMORE),
            (129.0, Band.NOMORE),
            (130.0, Band.BACKOFF),
            (5000.0, Band.BACKOFF),
        ],
    )
    def test_lower_is_better(self, value: float, band: Band) -> None:
        assert _p99_metric().band_of(value) is band

    def test_values_past_the_healthy_end_are_bold(self) -> None:
        assert _p99_metric().band_of(-5.0) is Band.BOLD

    @pytest.mark.parametrize(
        ("value", "band"),
        [(900.0, Band.BOLD), (80.0, Band.BOLD), (79.0, Band.MODERATE), (45.0, Band.CAUTIOUS),
         (39.0, Band.NOMORE), (10.0, Band.BACKOFF)],
    )  # fmt: skip
    def test_higher_is_better(self, value: float, band: Band) -> None:
        metric = HealthMetric.from_thresholds(
            entity=MetricEntity(region="east"),
            key="rps",
            better="higher",
            moderate=80,
            cautious=60,
            nomore=40,
            backoff=20,
        )
        assert metric.band_of(value) is band
        assert metric.nomore_threshold == 40

    def test_default_name_names_entity_and_key(self) -> None:
        metric = HealthMetric.from_thresholds(
            entity=MetricEntity(region="east", service="web"),
            key="error_rate",
            moderate=0.002,
            cautious=0.005,
            nomore=0.01,
            backoff=0.02,
        )
        assert metric.name == "east/web:error_rate"


class TestMetricValidation:
    """Bad definitions are refused with the field and the reason in the message."""

    def _bands(self, **override: Any) -> dict[str, Any]:
        bands: dict[str, Any] = {
            "bold": [0, 60],
            "moderate": [60, 80],
            "cautious": [80, 100],
            "nomore": [100, 130],
            "backoff": [130, None],
        }
        bands.update(override)
        return bands

    def _validate(self, **fields: Any) -> HealthMetric:
        data = {"entity": {"region": "east"}, "key": "p99_ms", "bands": self._bands()}
        data.update(fields)
        return HealthMetric.model_validate(data)

    def test_gap_between_bands_names_both_edges(self) -> None:
        with pytest.raises(ValidationError) as info:
            self._validate(bands=self._bands(moderate=[65, 80]))
        message = str(info.value)
        assert "bands.moderate.low" in message and "bands.bold.high" in message
        assert "contiguous" in message

    def test_bands_out_of_order_are_refused(self) -> None:
        with pytest.raises(ValidationError, match="bands.cautious.low"):
            self._validate(bands=self._bands(cautious=[120, 140], nomore=[100, 120]))

    def test_higher_is_better_ranges_given_upside_down_are_refused(self) -> None:
        with pytest.raises(ValidationError, match="higher-is-better metric must be contiguous"):
            self._validate(better="higher")

    def test_open_inner_edge_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="bands.nomore.high must be a finite edge"):
            self._validate(bands=self._bands(nomore=[100, None]))

    def test_empty_range_is_refused(self) -> None:
        with pytest.raises(ValidationError) as info:
            self._validate(bands=self._bands(moderate=[80, 60]))
        assert "bands.moderate" in str(info.value)
        assert "must be below high" in str(info.value)

    def test_unknown_key_lists_the_valid_ones(self) -> None:
        with pytest.raises(ValidationError) as info:
            self._validate(key="p95_ms")
        assert "key" in str(info.value) and "p99_ms" in str(info.value)

    def test_missing_band_must_be_unhealthy(self) -> None:
        with pytest.raises(ValidationError, match="missing_band"):
            self._validate(missing_band="cautious")

    def test_sample_fraction_is_a_fraction(self) -> None:
        with pytest.raises(ValidationError, match="min_sample_fraction"):
            self._validate(min_sample_fraction=1.5)

    def test_missing_band_accepts_a_name(self) -> None:
        assert self._validate(missing_band="nomore").missing_band is Band.NOMORE

    def test_unknown_field_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="threshold"):
            self._validate(threshold=3)


class TestEvaluation:
    """A report is read for the metric's entity; missing or thin data counts as unhealthy."""

    def test_value_in_band_with_headroom(self) -> None:
        reading = evaluate_metric(_p99_metric(), _report(p99_ms=90.0))
        assert reading.band is Band.CAUTIOUS
        assert reading.value == 90.0
        assert reading.status == "ok"
        assert reading.headroom == pytest.approx(0.10)

    def test_region_absent_from_report_is_missing(self) -> None:
        report = HealthReport(window_s=240, observed_at=NOW, regions=[])
        reading = evaluate_metric(_p99_metric(), report)
        assert reading.status == "missing"
        assert reading.band is Band.BACKOFF
        assert reading.value is None

    def test_zero_samples_is_missing_even_with_a_value(self) -> None:
        reading = evaluate_metric(_p99_metric(), _report(p99_ms=20.0, samples=0))
        assert reading.status == "missing" and reading.band is Band.BACKOFF

    def test_key_without_value_is_missing(self) -> None:
        reading = evaluate_metric(_p99_metric(), _report(p50_ms=20.0))
        assert reading.status == "missing"

    def test_missing_band_is_configurable(self) -> None:
        report = HealthReport(window_s=240, observed_at=NOW)
        reading = evaluate_metric(_p99_metric(missing_band="nomore"), report)
        assert reading.band is Band.NOMORE

    def test_too_few_samples_against_expected_count(self) -> None:
        metric = _p99_metric(min_sample_fraction=0.4)
        thin = evaluate_metric(metric, _report(p99_ms=20.0, samples=399), expected_samples=1000)
        enough = evaluate_metric(metric, _report(p99_ms=20.0, samples=400), expected_samples=1000)
        assert thin.status == "too_few_samples" and thin.band is Band.BACKOFF
        assert thin.value == 20.0
        assert enough.status == "ok" and enough.band is Band.BOLD

    def test_expected_rate_makes_a_short_window_fall_short(self) -> None:
        metric = _p99_metric(window_s=240, expected_sample_rate=10, min_sample_fraction=0.4)
        # 60 s of a 10/s stream is 600 samples, a quarter of the 2400 the window expects.
        short = evaluate_metric(metric, _report(window_s=60, p99_ms=20.0, samples=600))
        full = evaluate_metric(metric, _report(window_s=240, p99_ms=20.0, samples=2400))
        assert short.status == "too_few_samples" and short.expected_samples == 2400
        assert full.status == "ok"

    def test_service_pool_entity_reads_the_service_entry(self) -> None:
        metric = HealthMetric.from_thresholds(
            entity=MetricEntity(region="east", service="web"),
            key="error_rate",
            moderate=0.002,
            cautious=0.005,
            nomore=0.01,
            backoff=0.02,
        )
        report = HealthReport(
            window_s=240,
            observed_at=NOW,
            regions=[RegionHealth(region="east", error_rate=0.0, samples=10)],
            services=[
                ServiceHealth(region="east", service="web", error_rate=0.012, samples=10),
                ServiceHealth(region="west", service="web", error_rate=0.5, samples=10),
            ],
        )
        assert evaluate_metric(metric, report).band is Band.NOMORE

    def test_worst_band_governs(self) -> None:
        metrics = default_lab_metrics("east", p99_slo_ms=100)
        report = _report(p99_ms=50.0, error_rate=0.015, utilization=0.5)
        evaluation = evaluate_health(metrics, report)
        assert evaluation.band is Band.NOMORE
        assert evaluation.governing is not None
        assert evaluation.governing.key == "error_rate"
        assert evaluation.reading("east:p99_ms").band is Band.BOLD

    def test_duplicate_metric_names_are_refused(self) -> None:
        metric = _p99_metric()
        with pytest.raises(ValueError, match="duplicate"):
            evaluate_health([metric, metric], _report(p99_ms=1.0))


class TestDefaultLabMetrics:
    """The lab's default set puts NOMORE at the given limits with BACKOFF beyond."""

    def test_thresholds(self) -> None:
        p99, errors, utilization = default_lab_metrics(
            "east", p99_slo_ms=200, max_error_rate=0.02, max_utilization=0.8
        )
        assert (p99.key, p99.nomore_threshold) == ("p99_ms", 200)
        assert (errors.key, errors.nomore_threshold) == ("error_rate", 0.02)
        assert (utilization.key, utilization.nomore_threshold) == ("utilization", 0.8)
        assert utilization.boundaries()[3] == pytest.approx(0.9)

    def test_full_utilization_limit_still_leaves_a_backoff_band(self) -> None:
        *_, utilization = default_lab_metrics("east", max_utilization=1.0)
        assert utilization.band_of(1.0) is Band.NOMORE
        assert utilization.band_of(1.03) is Band.BACKOFF
