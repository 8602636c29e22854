"""Kraken-style health metrics: five value bands per metric, evaluated on a health report.

A metric (Kraken, OSDI'16, Fig. 4) names an entity (a region, or a service pool
in a region), a key of :class:`orchestrator.models.Metrics`, five contiguous
value ranges BOLD / MODERATE / CAUTIOUS / NOMORE / BACKOFF, the time window it
is judged over and the minimum fraction of the expected samples that must be
present. The definitions are plain pydantic, so runbooks can carry them in YAML::

    - entity: {region: us-east}
      key: p99_ms
      better: lower
      bands: {bold: [0, 60], moderate: [60, 80], cautious: [80, 100],
              nomore: [100, 130], backoff: [130, null]}

Missing data and too few samples count as unhealthy: by default BACKOFF. During
a load test a metric going dark is itself a symptom (an overloaded region drops
telemetry along with requests), and holding load where nothing can be seen is
not safe, so the conservative answer is to retreat. ``missing_band`` may relax
this to NOMORE (stop adding load, but do not retreat) for a pipeline known to be
flaky; it cannot be set to a healthy band.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.models import HealthReport, Metrics, StrictModel

__all__ = [
    "BAND_NAMES",
    "Band",
    "BandRange",
    "BandSet",
    "HealthEvaluation",
    "HealthMetric",
    "MetricEntity",
    "MetricReading",
    "default_lab_metrics",
    "evaluate_health",
    "evaluate_metric",
]


class Band(IntEnum):
    """Health bands, ordered from healthiest to worst so ``max`` gives the governing one."""

    BOLD = 0
    MODERATE = 1
    CAUTIOUS = 2
    NOMORE = 3
    BACKOFF = 4

    @property
    def healthy(self) -> bool:
        """Whether more load may still be added at this band."""
        return self < Band.NOMORE


#: The field name of each band in a :class:`BandSet`, healthiest first.
BAND_NAMES: tuple[str, ...] = ("bold", "moderate", "cautious", "nomore", "backoff")

#: Fields of :class:`Metrics` a health metric may watch.
METRIC_KEYS: tuple[str, ...] = tuple(Metrics.model_fields)


class BandRange(StrictModel):
    """A value range ``[low, high)``; ``None`` is an open end. Also accepts ``[low, high]``."""

    low: float | None = None
    high: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_pair(cls, data: Any) -> Any:
        if isinstance(data, list | tuple):
            if len(data) != 2:
                raise ValueError(f"a band range is [low, high], got {len(data)} values")
            return {"low": data[0], "high": data[1]}
        return data

    @model_validator(mode="after")
    def _ordered(self) -> BandRange:
        if self.low is not None and self.high is not None and not self.low < self.high:
            raise ValueError(f"low {self.low} must be below high {self.high}")
        return self


class BandSet(StrictModel):
    """The five ranges of one metric. Which end is healthy is the metric's ``better``."""

    bold: BandRange
    moderate: BandRange
    cautious: BandRange
    nomore: BandRange
    backoff: BandRange

    def ranges(self) -> list[BandRange]:
        return [getattr(self, name) for name in BAND_NAMES]


class MetricEntity(StrictModel):
    """What a metric watches: a region, or one service pool in it."""

    region: str = Field(min_length=1)
    service: str | None = Field(default=None, min_length=1)

    def label(self) -> str:
        return self.region if self.service is None else f"{self.region}/{self.service}"


class HealthMetric(StrictModel):
    """One banded health metric (Kraken's metric definition)."""

    #: stable name used in readings and results; defaults to ``<entity>:<key>``
    name: str = ""
    entity: MetricEntity
    key: str
    #: ``lower``: latency, errors, utilization; ``higher``: e.g. throughput served
    better: Literal["lower", "higher"] = "lower"
    bands: BandSet
    #: the window the metric is judged over, in seconds (Kraken: 4 minutes)
    window_s: float = Field(default=240.0, gt=0)
    #: minimum share of the expected samples that must be present (Kraken: 0.4)
    min_sample_fraction: float = Field(default=0.4, ge=0.0, le=1.0)
    #: samples per second expected from the entity; with it, too few samples is unhealthy
    expected_sample_rate: float | None = Field(default=None, gt=0)
    #: the band given to missing data or too few samples (see module docstring)
    missing_band: Band = Band.BACKOFF

    @field_validator("key")
    @classmethod
    def _known_key(cls, key: str) -> str:
        if key not in METRIC_KEYS:
            raise ValueError(f"{key!r} is not a health field; expected one of {list(METRIC_KEYS)}")
        return key

    @field_validator("missing_band", mode="before")
    @classmethod
    def _band_by_name(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return Band[value.upper()]
            except KeyError:
                raise ValueError(f"unknown band {value!r}; expected one of {BAND_NAMES}") from None
        return value

    @field_validator("missing_band")
    @classmethod
    def _missing_is_unhealthy(cls, band: Band) -> Band:
        if band.healthy:
            raise ValueError(
                f"missing data must count as unhealthy (NOMORE or BACKOFF), not {band.name}"
            )
        return band

    @model_validator(mode="after")
    def _contiguous(self) -> HealthMetric:
        _check_chain(self.bands.ranges(), self.better)
        if not self.name:
            self.name = f"{self.entity.label()}:{self.key}"
        return self

    def boundaries(self) -> tuple[float, float, float, float]:
        """The four inner thresholds, healthiest first; the third is the NOMORE threshold."""
        ranges = self.bands.ranges()
        edges = [r.high if self.better == "lower" else r.low for r in ranges[:4]]
        return (edges[0], edges[1], edges[2], edges[3])  # type: ignore[return-value]

    @property
    def nomore_threshold(self) -> float:
        return self.boundaries()[2]

    def band_of(self, value: float) -> Band:
        """The band of a value; values past either outer end take the nearest band."""
        crossed = sum(1 for edge in self.boundaries() if self._at_or_past(value, edge))
        return Band(crossed)

    def _at_or_past(self, value: float, edge: float) -> bool:
        # Ranges are [low, high) on the value axis whichever end is healthy.
        return value >= edge if self.better == "lower" else value < edge

    @classmethod
    def from_thresholds(
        cls,
        *,
        entity: MetricEntity,
        key: str,
        moderate: float,
        cautious: float,
        nomore: float,
        backoff: float,
        better: Literal["lower", "higher"] = "lower",
        **extra: Any,
    ) -> HealthMetric:
        """A metric from its four band edges (where each band starts), outer ends open."""
        edges = [moderate, cautious, nomore, backoff]
        lows: list[float | None] = [None, *edges]
        highs: list[float | None] = [*edges, None]
        pairs = zip(lows, highs, strict=True)
        if better == "higher":
            pairs = zip(highs, lows, strict=True)
        bands = {
            name: {"low": lo, "high": hi} for name, (lo, hi) in zip(BAND_NAMES, pairs, strict=True)
        }
        return cls.model_validate(
            {"entity": entity, "key": key, "better": better, "bands": bands, **extra}
        )


def _check_chain(ranges: list[BandRange], better: Literal["lower", "higher"]) -> None:
    """Each band must start where the previous one ends, moving away from healthy."""
    for index in range(4):
        cur, nxt = ranges[index], ranges[index + 1]
        name, next_name = BAND_NAMES[index], BAND_NAMES[index + 1]
        if better == "lower":
            shared, shared_field = cur.high, f"bands.{name}.high"
            other, other_field = nxt.low, f"bands.{next_name}.low"
            direction = "rise from bold to backoff"
        else:
            shared, shared_field = cur.low, f"bands.{name}.low"
            other, other_field = nxt.high, f"bands.{next_name}.high"
            direction = "fall from bold to backoff"
        if shared is None or other is None:
            missing = shared_field if shared is None else other_field
            raise ValueError(f"{missing} must be a finite edge shared by {name} and {next_name}")
        if shared != other:
            raise ValueError(
                f"{other_field} is {other} but {shared_field} is {shared}: "
                f"bands of a {better}-is-better metric must be contiguous and {direction}"
            )


# --- evaluation ----------------------------------------------------------------------------


class MetricReading(StrictModel):
    """One metric judged on one window: its band, the value and why."""

    metric: str
    key: str
    entity: MetricEntity
    better: Literal["lower", "higher"]
    band: Band
    value: float | None
    samples: int
    expected_samples: float | None = None
    #: ``ok``, ``missing`` (no value or no samples) or ``too_few_samples``
    status: Literal["ok", "missing", "too_few_samples"]
    #: the NOMORE threshold, carried so the step policy needs no metric definitions
    nomore_threshold: float
    #: relative distance to the NOMORE threshold, positive while below it; None without data
    headroom: float | None = None

    @property
    def badness(self) -> float | None:
        """The value oriented so that larger is always worse."""
        if self.value is None:
            return None
        return self.value if self.better == "lower" else -self.value

    @property
    def badness_threshold(self) -> float:
        return self.nomore_threshold if self.better == "lower" else -self.nomore_threshold


class HealthEvaluation(StrictModel):
    """Every metric's reading for one window; the worst band governs."""

    readings: list[MetricReading]

    @property
    def band(self) -> Band:
        return max((r.band for r in self.readings), default=Band.BOLD)

    @property
    def governing(self) -> MetricReading | None:
        """The reading with the worst band (ties: least headroom)."""
        if not self.readings:
            return None
        return max(
            self.readings,
            key=lambda r: (r.band, -(r.headroom if r.headroom is not None else -1e9)),
        )

    def reading(self, metric: str) -> MetricReading:
        for reading in self.readings:
            if reading.metric == metric:
                return reading
        raise KeyError(metric)


def _entity_metrics(report: HealthReport, entity: MetricEntity) -> Metrics:
    if entity.service is None:
        return report.region(entity.region)
    for entry in report.services:
        if entry.region == entity.region and entry.service == entity.service:
            return entry
    return Metrics()


def _headroom(metric: HealthMetric, value: float) -> float:
    threshold = metric.nomore_threshold
    gap = threshold - value if metric.better == "lower" else value - threshold
    return gap / abs(threshold) if threshold != 0 else gap


def evaluate_metric(
    metric: HealthMetric, report: HealthReport, *, expected_samples: float | None = None
) -> MetricReading:
    """The band of ``metric`` in ``report``.

    The expected sample count is ``expected_samples`` when the caller knows the
    load it sent, else ``expected_sample_rate`` times the metric's window; a
    report covering a shorter window than the metric's then falls short in
    proportion. With neither, only a window with no samples (or no value) is missing.
    """
    data = _entity_metrics(report, metric.entity)
    value = getattr(data, metric.key)
    expected = expected_samples
    if expected is None and metric.expected_sample_rate is not None:
        expected = metric.expected_sample_rate * metric.window_s
    common: dict[str, Any] = {
        "metric": metric.name,
        "key": metric.key,
        "entity": metric.entity,
        "better": metric.better,
        "samples": data.samples,
        "expected_samples": expected,
        "nomore_threshold": metric.nomore_threshold,
    }
    if value is None or data.missing:
        return MetricReading(band=metric.missing_band, value=None, status="missing", **common)
    value = float(value)
    headroom = _headroom(metric, value)
    if expected is not None and data.samples < metric.min_sample_fraction * expected:
        return MetricReading(
            band=metric.missing_band,
            value=value,
            status="too_few_samples",
            headroom=headroom,
            **common,
        )
    return MetricReading(
        band=metric.band_of(value), value=value, status="ok", headroom=headroom, **common
    )


def evaluate_health(
    metrics: Sequence[HealthMetric],
    report: HealthReport,
    *,
    expected_samples: Mapping[str, float] | None = None,
) -> HealthEvaluation:
    """Every metric on one report; ``expected_samples`` is keyed by metric name."""
    names = [m.name for m in metrics]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"metrics: duplicate metric names {duplicates}")
    expected = expected_samples or {}
    return HealthEvaluation(
        readings=[
            evaluate_metric(m, report, expected_samples=expected.get(m.name)) for m in metrics
        ]
    )


def default_lab_metrics(
    region: str,
    *,
    p99_slo_ms: float = 100.0,
    max_error_rate: float = 0.01,
    max_utilization: float = 0.9,
    service: str | None = None,
    window_s: float = 240.0,
    expected_sample_rate: float | None = None,
) -> list[HealthMetric]:
    """The lab's default set: p99 against its SLO, error rate and utilization.

    Each metric's NOMORE threshold is the limit given; BACKOFF starts a margin
    past it (30% for latency, double for errors, halfway to saturation for
    utilization) so one step over the limit stops the test instead of aborting it.
    """
    entity = MetricEntity(region=region, service=service)
    shared: dict[str, Any] = {"window_s": window_s, "expected_sample_rate": expected_sample_rate}
    return [
        HealthMetric.from_thresholds(
            entity=entity,
            key="p99_ms",
            moderate=0.6 * p99_slo_ms,
            cautious=0.8 * p99_slo_ms,
            nomore=p99_slo_ms,
            backoff=1.3 * p99_slo_ms,
            **shared,
        ),
        HealthMetric.from_thresholds(
            entity=entity,
            key="error_rate",
            moderate=0.2 * max_error_rate,
            cautious=0.5 * max_error_rate,
            nomore=max_error_rate,
            backoff=2.0 * max_error_rate,
            **shared,
        ),
        HealthMetric.from_thresholds(
            entity=entity,
            key="utilization",
            moderate=0.7 * max_utilization,
            cautious=0.85 * max_utilization,
            nomore=max_utilization,
            backoff=max_utilization + max((1.0 - max_utilization) / 2, 0.02 * max_utilization),
            **shared,
        ),
    ]
