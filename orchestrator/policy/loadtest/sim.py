"""A pure, seeded simulation of a region under a load test, for tests and benchmarks.

The region has a hidden capacity (requests per second at utilization 1). Its
metrics respond to the load held on it the way a pool of servers does:

- utilization is load / capacity (saturating at 1);
- p99 latency follows a multi-server queueing curve, flat until the knee and
  steep near saturation: ``base * (1 + queue_factor * rho**knee / (1 - rho))``,
  capped at the timeout;
- the error rate is the share of requests beyond ``error_onset * capacity``
  (a bottleneck below the servers' own, like Kraken's top-of-rack switches);
- every value carries seeded multiplicative noise: ``noise`` for p99 and the error
  rate, less for averages (see ``NOISE_SCALE``).

The true capacity a load test should find is where the first metric, without
noise, crosses its NOMORE threshold; :func:`true_limit` computes it by bisection.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pydantic import Field

from orchestrator.models import HealthReport, RegionHealth, StrictModel
from orchestrator.policy.health_metrics import HealthMetric, evaluate_health
from orchestrator.policy.loadtest.capacity import CapacityEstimate, StepRecord, estimate_capacity
from orchestrator.policy.loadtest.kraken import StepDecision

__all__ = [
    "BOTTLENECK_TOLERANCE",
    "NOISE_SCALE",
    "Policy",
    "SimulatedRegion",
    "SimulatedRun",
    "run_load_test",
    "true_crossings",
    "true_limit",
]

#: A named bottleneck is right if its own true crossing is this close to the capacity:
#: metrics crossing within noise of each other are equally limiting.
BOTTLENECK_TOLERANCE = 0.03

#: A policy as the simulator drives it: the steps so far in, the next decision out.
Policy = Callable[[Sequence[StepRecord]], StepDecision]

_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)

#: Noise per metric relative to ``noise``: a tail quantile and a rare-event rate wander
#: most from window to window; averages over every request (utilization, rps) much less.
NOISE_SCALE = {"p99_ms": 1.0, "error_rate": 1.0, "p50_ms": 0.5, "utilization": 0.25, "rps": 0.25}


class SimulatedRegion(StrictModel):
    region: str = "sim"
    #: hidden: requests per second the region serves at utilization 1
    capacity_rps: float = Field(gt=0)
    base_p99_ms: float = Field(default=40.0, gt=0)
    queue_factor: float = Field(default=0.5, gt=0)
    #: higher: a flatter curve that bends later (more servers behind the region)
    knee: float = Field(default=4.0, ge=1)
    timeout_ms: float = Field(default=2000.0, gt=0)
    #: share of capacity beyond which requests fail
    error_onset: float = Field(default=1.0, gt=0, le=1)
    base_error_rate: float = Field(default=0.0005, ge=0, le=1)
    #: relative standard deviation of every reported value
    noise: float = Field(default=0.02, ge=0, lt=0.5)
    window_s: float = Field(default=240.0, gt=0)
    #: share of requests that report telemetry (below 1: too few samples)
    sample_fraction: float = Field(default=1.0, ge=0, le=1)

    def true_values(self, load: float) -> dict[str, float]:
        """Noise-free metrics at ``load``."""
        rho = load / self.capacity_rps
        if rho < 1:
            p99 = self.base_p99_ms * (1 + self.queue_factor * rho**self.knee / (1 - rho))
        else:
            p99 = self.timeout_ms
        onset = self.error_onset * self.capacity_rps
        dropped = max(0.0, load - onset) / load if load > 0 else 0.0
        error_rate = min(1.0, self.base_error_rate + dropped)
        served = load * (1 - error_rate)
        return {
            "rps": served,
            "utilization": min(rho, 1.0),
            "p50_ms": min(self.base_p99_ms / 3 * (1 + rho / max(1e-9, 1 - rho) / 10), p99),
            "p99_ms": min(p99, self.timeout_ms),
            "error_rate": error_rate,
        }

    def observe(self, load: float, rng: random.Random) -> HealthReport:
        """One window at ``load``, with noise drawn from ``rng``."""
        values = self.true_values(load)
        noisy = {
            k: max(0.0, v * (1 + rng.gauss(0.0, self.noise * NOISE_SCALE[k])))
            for k, v in values.items()
        }
        noisy["utilization"] = min(noisy["utilization"], 1.0)
        noisy["error_rate"] = min(noisy["error_rate"], 1.0)
        samples = int(load * self.window_s * self.sample_fraction)
        health = RegionHealth(region=self.region, samples=samples)
        if samples > 0:
            health = RegionHealth(region=self.region, samples=samples, **noisy)
        return HealthReport(window_s=self.window_s, observed_at=_EPOCH, regions=[health])


def _crossing(region: SimulatedRegion, metric: HealthMetric, band_edge: float) -> float | None:
    """The load at which ``metric``'s noise-free value first reaches ``band_edge``."""
    sign = 1.0 if metric.better == "lower" else -1.0

    def reached(load: float) -> bool:
        return sign * region.true_values(load)[metric.key] >= sign * band_edge

    low, high = 0.0, 3.0 * region.capacity_rps
    if not reached(high):
        return None
    for _ in range(80):
        mid = (low + high) / 2
        if reached(mid):
            high = mid
        else:
            low = mid
    return high


def true_crossings(
    region: SimulatedRegion, metrics: Sequence[HealthMetric], *, band: str = "nomore"
) -> dict[str, float | None]:
    """Per metric on the region, the noise-free load where it enters ``band`` (None: never)."""
    index = {"nomore": 2, "backoff": 3}[band]
    return {
        m.name: _crossing(region, m, m.boundaries()[index])
        for m in metrics
        if m.entity.region == region.region and m.entity.service is None
    }


def true_limit(
    region: SimulatedRegion, metrics: Sequence[HealthMetric], *, band: str = "nomore"
) -> tuple[float, str]:
    """The load where the first metric crosses into ``band`` (noise-free), and that metric."""
    found = [
        (load, name)
        for name, load in true_crossings(region, metrics, band=band).items()
        if load is not None
    ]
    if not found:
        raise ValueError(f"metrics: none of them ever reaches {band} in region {region.region}")
    return min(found)


class SimulatedRun(StrictModel):
    """One load test run to its end against a simulated region."""

    steps: int
    loads: list[float]
    decisions: list[StepDecision]
    history: list[StepRecord]
    estimate: CapacityEstimate
    true_capacity: float
    true_bottleneck: str
    #: whether the named bottleneck truly crosses within BOTTLENECK_TOLERANCE of the capacity
    bottleneck_ok: bool
    #: (estimate - true) / true
    error: float
    #: windows held above the true capacity (each step is one window)
    windows_over: int
    #: windows held above the load where the first metric truly reaches BACKOFF
    windows_in_backoff: int
    #: highest load held, relative to the true capacity, minus 1 (0 when never over)
    max_overshoot: float
    final_action: str


def run_load_test(
    region: SimulatedRegion,
    metrics: Sequence[HealthMetric],
    policy: Policy,
    *,
    start_load: float,
    seed: int,
    max_steps: int = 200,
) -> SimulatedRun:
    """Drive ``policy`` from ``start_load`` until it stops or retreats (or ``max_steps``)."""
    rng = random.Random(seed)
    truth, bottleneck = true_limit(region, metrics)
    crossings = true_crossings(region, metrics)
    backoff_at, _ = true_limit(region, metrics, band="backoff")
    history: list[StepRecord] = []
    decisions: list[StepDecision] = []
    load = start_load
    for _ in range(max_steps):
        report = region.observe(load, rng)
        expected = {m.name: load * region.window_s for m in metrics}
        evaluation = evaluate_health(metrics, report, expected_samples=expected)
        history.append(StepRecord(load=load, readings=evaluation.readings))
        decision = policy(history)
        decisions.append(decision)
        if decision.terminal:
            break
        load = decision.load
    estimate = estimate_capacity(history)
    loads = [s.load for s in history]
    return SimulatedRun(
        steps=len(history),
        loads=loads,
        decisions=decisions,
        history=history,
        estimate=estimate,
        true_capacity=truth,
        true_bottleneck=bottleneck,
        bottleneck_ok=_named_right(estimate, crossings, truth),
        error=(estimate.load - truth) / truth,
        windows_over=sum(1 for x in loads if x > truth),
        windows_in_backoff=sum(1 for x in loads if x > backoff_at),
        max_overshoot=max(0.0, max(loads) / truth - 1),
        final_action=decisions[-1].action.value if decisions else "none",
    )


def _named_right(
    estimate: CapacityEstimate, crossings: dict[str, float | None], truth: float
) -> bool:
    named = crossings.get(estimate.bottleneck or "")
    return named is not None and named <= truth * (1 + BOTTLENECK_TOLERANCE)
