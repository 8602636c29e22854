"""Where a load test's metrics cross their NOMORE thresholds: trends and the capacity found.

Each metric's readings over the steps form points (load, value), oriented so
that larger is worse. :func:`predict_crossing` extrapolates the trend below the
threshold (for the step policy); :func:`estimate_capacity` brackets the
crossing between the last load below it and the first at or above it and
interpolates there, naming the metric that crossed first: the bottleneck.
:func:`theoretical_capacity` is what the topology promises, the scale of both.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from orchestrator.exceptions import InvalidInstance
from orchestrator.models import StrictModel, Topology
from orchestrator.policy.health_metrics import Band, MetricReading

__all__ = [
    "EXTRAPOLATION_LIMIT",
    "CapacityEstimate",
    "StepRecord",
    "capacity_ratio",
    "central_crossing",
    "crossing_candidates",
    "metric_points",
    "estimate_capacity",
    "predict_crossing",
    "theoretical_capacity",
]

#: Points within this relative distance below the bracket feed the local fit.
FIT_SPAN = 0.12
#: A trend's crossing is trusted as the capacity only this far past the highest load tested.
EXTRAPOLATION_LIMIT = 0.05


class StepRecord(StrictModel):
    """One step of a load test: the load held on the target and the readings of its window."""

    load: float = Field(ge=0)
    readings: list[MetricReading]

    @property
    def band(self) -> Band:
        return max((r.band for r in self.readings), default=Band.BOLD)

    @property
    def governing(self) -> MetricReading | None:
        """The reading with the worst band; ties go to the least headroom."""
        if not self.readings:
            return None
        return max(
            self.readings,
            key=lambda r: (r.band, -(r.headroom if r.headroom is not None else -1e9)),
        )


class CapacityEstimate(StrictModel):
    """The load at which the first metric crosses its NOMORE threshold."""

    load: float
    #: the metric that limits the target (crossed first), when one did or is trending to
    bottleneck: str | None = None
    bottleneck_key: str | None = None
    #: ``interpolated``: bracketed by steps; ``extrapolated``: trend just past the last step;
    #: ``lower_bound``: nothing crossed (or a metric went dark): capacity is at least ``load``
    method: Literal["interpolated", "extrapolated", "lower_bound"]
    last_healthy_load: float | None = None
    first_unhealthy_load: float | None = None
    max_load_tested: float
    #: every metric's own estimated crossing (None: no trend towards its threshold)
    per_metric: dict[str, float | None] = Field(default_factory=dict)


def metric_points(history: Sequence[StepRecord], metric: str) -> list[tuple[float, float]]:
    """(load, badness) of one metric over the steps with usable data, sorted by load.

    Windows held at the same load are averaged, which is what holding buys.
    """
    by_load: dict[float, list[float]] = {}
    for step in history:
        for reading in step.readings:
            if reading.metric == metric and reading.status == "ok" and reading.badness is not None:
                by_load.setdefault(step.load, []).append(reading.badness)
    return [(load, sum(v) / len(v)) for load, v in sorted(by_load.items())]


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares slope and intercept; None when the loads do not spread."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return slope, my - slope * mx


def _quadratic_root(points: Sequence[tuple[float, float]], threshold: float) -> float | None:
    """The crossing of the parabola through three points, when it bends upwards."""
    (x0, y0), (x1, y1), (x2, y2) = points
    d01 = (y1 - y0) / (x1 - x0)
    d12 = (y2 - y1) / (x2 - x1)
    curvature = (d12 - d01) / (x2 - x0)
    if curvature <= 0:
        return None
    # y = y2 + s (x - x2) + c (x - x2)^2 with s the slope at x2.
    slope_at_end = d12 + curvature * (x2 - x1)
    rise = threshold - y2
    disc = slope_at_end**2 + 4 * curvature * rise
    if disc < 0:
        return None
    return x2 + (-slope_at_end + disc**0.5) / (2 * curvature)


def crossing_candidates(
    points: Sequence[tuple[float, float]], threshold: float, *, up_to: float
) -> list[float]:
    """Every trend's crossing of ``threshold`` above the last point at or below ``up_to``.

    Four trends: proportional to load (exact for utilization-like metrics,
    optimistic for those with an offset), the secant of the last two loads, a
    least-squares line over the last four (steadier under noise) and the
    parabola through the last three (it sees latency bend upwards). Empty: no
    trend rises towards the threshold. A point already at it gives its own load.
    """
    below = [p for p in points if p[0] <= up_to]
    if not below:
        return []
    last_x, last_y = below[-1]
    if last_y >= threshold:
        return [last_x]
    candidates: list[float] = []
    if last_x > 0 and last_y > 0:
        candidates.append(last_x * threshold / last_y)
    for window in (below[-2:], below[-4:]):
        fit = _line(window)
        if fit is not None and fit[0] > 0:
            candidates.append(last_x + (threshold - last_y) / fit[0])
    if len(below) >= 3:
        root = _quadratic_root(below[-3:], threshold)
        if root is not None:
            candidates.append(root)
    return [c for c in candidates if c > last_x]


def predict_crossing(
    points: Sequence[tuple[float, float]], threshold: float, *, up_to: float
) -> float | None:
    """The lowest trend crossing (see :func:`crossing_candidates`); None without a trend.

    The lowest wins because overshooting costs a BACKOFF while undershooting
    costs one more window.
    """
    candidates = crossing_candidates(points, threshold, up_to=up_to)
    return min(candidates) if candidates else None


def central_crossing(
    points: Sequence[tuple[float, float]], threshold: float, *, up_to: float
) -> float | None:
    """The median trend crossing: the estimate, where :func:`predict_crossing` is the guard.

    One noisy window can tilt a secant or a parabola; the median of the trends
    is not pulled down by that one, so a capacity is not understated by it.
    """
    candidates = crossing_candidates(points, threshold, up_to=up_to)
    return statistics.median(candidates) if candidates else None


def _bracketed_crossing(
    points: Sequence[tuple[float, float]], threshold: float
) -> tuple[float, float | None, float] | None:
    """(estimate, last load below, first load at/over) when the threshold was reached."""
    over = [x for x, y in points if y >= threshold]
    if not over:
        return None
    first_over = min(over)
    under = [(x, y) for x, y in points if x < first_over and y < threshold]
    if not under:
        return first_over, None, first_over
    last_under = max(x for x, _ in under)
    near = [(x, y) for x, y in points if first_over * (1 - FIT_SPAN) <= x <= first_over]
    fit = _line(near)
    y_under = dict(points)[last_under]
    y_over = dict(points)[first_over]
    width = first_over - last_under
    if fit is not None and fit[0] > 0:
        slope, intercept = fit
        estimate = (threshold - intercept) / slope
    else:
        estimate = last_under + (threshold - y_under) / (y_over - y_under) * width
    # Noise may tilt the fit; the crossing stays near the bracket the readings saw.
    estimate = min(max(estimate, last_under - width / 2), first_over + width / 2)
    return estimate, last_under, first_over


def _threshold_of(history: Sequence[StepRecord], metric: str) -> MetricReading:
    for step in reversed(history):
        for reading in step.readings:
            if reading.metric == metric:
                return reading
    raise KeyError(metric)


def estimate_capacity(
    history: Sequence[StepRecord], *, extrapolation_limit: float = EXTRAPOLATION_LIMIT
) -> CapacityEstimate:
    """The capacity the steps taken reveal, with the bottleneck metric named.

    A metric whose readings reached NOMORE is interpolated inside its bracket;
    one still below is extrapolated from its trend, trusted only up to
    ``extrapolation_limit`` past the highest load tested. The lowest crossing
    is the capacity. If the first unhealthy step was unhealthy only because a
    metric had no data, the capacity is a lower bound at the last healthy load.
    """
    if not history:
        raise ValueError("history: no steps to estimate from")
    max_tested = max(s.load for s in history)
    healthy = [s.load for s in history if s.band.healthy]
    unhealthy = [s for s in history if not s.band.healthy]
    first_bad = unhealthy[0] if unhealthy else None
    last_healthy = (
        max((x for x in healthy if first_bad is None or x < first_bad.load), default=None)
        if healthy
        else None
    )
    names = sorted({r.metric for s in history for r in s.readings})
    per_metric: dict[str, float | None] = {}
    methods: dict[str, Literal["interpolated", "extrapolated"]] = {}
    for name in names:
        reference = _threshold_of(history, name)
        threshold = reference.badness_threshold
        points = metric_points(history, name)
        bracketed = _bracketed_crossing(points, threshold)
        if bracketed is not None:
            per_metric[name], methods[name] = bracketed[0], "interpolated"
            continue
        predicted = central_crossing(points, threshold, up_to=max_tested)
        if predicted is not None and predicted <= max_tested * (1 + extrapolation_limit):
            per_metric[name], methods[name] = predicted, "extrapolated"
        else:
            per_metric[name] = predicted
    common = {
        "last_healthy_load": last_healthy,
        "first_unhealthy_load": first_bad.load if first_bad else None,
        "max_load_tested": max_tested,
        "per_metric": per_metric,
    }
    dark = _went_dark(first_bad)
    if dark is not None:
        return CapacityEstimate(
            load=last_healthy if last_healthy is not None else 0.0,
            bottleneck=dark.metric,
            bottleneck_key=dark.key,
            method="lower_bound",
            **common,
        )
    usable = {n: v for n, v in per_metric.items() if n in methods and v is not None}
    if usable:
        name = min(usable, key=lambda n: usable[n])
        return CapacityEstimate(
            load=usable[name],
            bottleneck=name,
            bottleneck_key=_threshold_of(history, name).key,
            method=methods[name],
            **common,
        )
    closest = history[-1].governing
    return CapacityEstimate(
        load=max(healthy) if healthy else 0.0,
        bottleneck=closest.metric if closest else None,
        bottleneck_key=closest.key if closest else None,
        method="lower_bound",
        **common,
    )


def _went_dark(step: StepRecord | None) -> MetricReading | None:
    """The reading that made ``step`` unhealthy by lacking data, if no value did."""
    if step is None:
        return None
    by_value = [r for r in step.readings if r.status == "ok" and not r.band.healthy]
    if by_value:
        return None
    dark = [r for r in step.readings if r.status != "ok" and not r.band.healthy]
    return dark[0] if dark else None


def theoretical_capacity(topology: Topology, region: str, service: str | None = None) -> float:
    """The capacity the topology promises: ``capacity_rps`` of the service in the region.

    Without ``service`` the region must list exactly one service capacity.
    """
    try:
        entry = topology.region(region)
    except KeyError:
        raise InvalidInstance(
            f"region: {region!r} is not in the topology ({topology.region_names})"
        ) from None
    capacities = entry.capacity_rps
    if service is None:
        if len(capacities) != 1:
            raise InvalidInstance(
                f"service: region {region!r} lists {len(capacities)} service capacities "
                f"({sorted(capacities)}); name the service"
            )
        return next(iter(capacities.values()))
    if service not in capacities:
        raise InvalidInstance(
            f"service: region {region!r} has no capacity_rps for {service!r} ({sorted(capacities)})"
        )
    return capacities[service]


def capacity_ratio(estimate: float, theoretical: float) -> float:
    """The estimate as a share of the theoretical capacity (Kraken's headline number)."""
    if theoretical <= 0:
        raise InvalidInstance(f"theoretical: capacity must be positive, got {theoretical}")
    return estimate / theoretical
