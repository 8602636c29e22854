"""Drain capacity check: would the regions left take a drained region's load safely?

For every service with a capacity, the load of the regions being drained (this
request plus drains already running, plus whatever still reaches regions that
are drained or abnormal) is spread over the remaining active regions, and each
region's predicted utilization is compared with the target (Maelstrom plans
switches at 75%, §4.7). Spreading follows one of three rules:

- ``spare`` (default): in proportion to each region's spare capacity, which is
  how load lands when the edge simply prefers regions with headroom;
- ``capacity``: in proportion to capacity;
- ``balanced``: water-filling to the lowest common utilization, the best the
  rebalancer can do, so a refusal under it is a refusal under any routing.

Batch services are left out: a drain stops batch jobs rather than moving them.
Missing health for a region that sends or receives load refuses the drain:
an unobserved region cannot be shown to be safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from orchestrator.exceptions import InvalidInstance, UnsafeRequest
from orchestrator.models import HealthReport, RegionStatus, ServiceKind, StrictModel, Topology

__all__ = [
    "DEFAULT_TARGET_UTILIZATION",
    "DrainForecast",
    "DrainRefused",
    "RegionForecast",
    "ServiceForecast",
    "check_drain_capacity",
    "forecast_drain",
]

DEFAULT_TARGET_UTILIZATION = 0.75

Spread = Literal["spare", "capacity", "balanced"]
Role = Literal["receiving", "draining", "running-drain", "out"]


class ServiceForecast(StrictModel):
    service: str
    capacity_rps: float
    load_before_rps: float
    load_after_rps: float
    utilization_before: float | None
    utilization_after: float | None


class RegionForecast(StrictModel):
    region: str
    #: receiving load, drained by this request, drained by a running drain, or already out
    role: Role
    #: the highest service utilization in the region
    utilization_before: float | None
    utilization_after: float | None
    services: list[ServiceForecast] = Field(default_factory=list)


class DrainForecast(StrictModel):
    draining: list[str]
    running: list[str]
    target_utilization: float
    spread: Spread
    regions: list[RegionForecast]
    safe: bool
    worst_region: str | None = None
    worst_utilization: float | None = None
    #: why the drain is unsafe, one line per reason
    reasons: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        shown = ", ".join(
            f"{r.region} {r.utilization_after:.2f}"
            for r in self.regions
            if r.role == "receiving" and r.utilization_after is not None
        )
        return f"predicted utilization after the drain: {shown or 'none'}"


class DrainRefused(UnsafeRequest):
    """A drain refused for capacity; ``forecast`` holds every region's numbers."""

    def __init__(self, message: str, forecast: DrainForecast) -> None:
        super().__init__(message)
        self.forecast = forecast

    @classmethod
    def type_name(cls) -> str:
        return UnsafeRequest.__name__


def _load(
    topology: Topology, health: HealthReport, region: str, service: str, only_service: bool
) -> float | None:
    capacity = topology.region(region).capacity_rps.get(service, 0.0)
    for entry in health.services:
        if entry.region == region and entry.service == service and not entry.missing:
            if entry.rps is not None:
                return entry.rps
            if entry.utilization is not None:
                return entry.utilization * capacity
    if only_service:
        # With one capacity-bearing service, the region aggregate is that service.
        agg = health.region(region)
        if not agg.missing:
            if agg.rps is not None:
                return agg.rps
            if agg.utilization is not None:
                return agg.utilization * capacity
    return None


def _spread(
    moving: float, loads: dict[str, float], caps: dict[str, float], rule: Spread
) -> dict[str, float]:
    """How much of ``moving`` each receiving region gets."""
    if moving <= 0 or not caps:
        return dict.fromkeys(caps, 0.0)
    if rule == "balanced":
        total_cap = sum(caps.values())
        # Water-filling: raise a common utilization level until the moving load fits.
        level = (moving + sum(loads.values())) / total_cap
        active = dict(caps)
        while True:
            over = [r for r in active if loads[r] / caps[r] > level]
            if not over:
                break
            for r in over:
                del active[r]
            if not active:
                break
            level = (moving + sum(loads[r] for r in active)) / sum(active.values())
        return {r: (max(0.0, level * caps[r] - loads[r]) if r in active else 0.0) for r in caps}
    weights = {r: max(caps[r] - loads[r], 0.0) for r in caps} if rule == "spare" else dict(caps)
    if sum(weights.values()) <= 0:
        weights = dict(caps)
    total = sum(weights.values())
    return {r: moving * w / total for r, w in weights.items()}


def forecast_drain(
    topology: Topology,
    health: HealthReport,
    drain: Sequence[str],
    running: Sequence[str] = (),
    *,
    target: float = DEFAULT_TARGET_UTILIZATION,
    spread: Spread = "spare",
) -> DrainForecast:
    """Every region's predicted utilization after draining ``drain`` (with ``running``
    drains also in effect); never raises for an unsafe result, see ``safe``."""
    if not 0 < target <= 1:
        raise InvalidInstance(f"target: {target} is not within (0, 1]")
    known = set(topology.region_names)
    for field, names in (("drain", drain), ("running", running)):
        unknown = [r for r in names if r not in known]
        if unknown:
            raise InvalidInstance(f"{field}: unknown region(s) {', '.join(unknown)}")
    if not drain:
        raise InvalidInstance("drain: name at least one region")
    draining, running_set = set(drain), set(running) - set(drain)
    roles: dict[str, Role] = {}
    for entry in topology.regions:
        if entry.name in draining:
            roles[entry.name] = "draining"
        elif entry.name in running_set:
            roles[entry.name] = "running-drain"
        elif entry.status is not RegionStatus.ACTIVE:
            roles[entry.name] = "out"
        else:
            roles[entry.name] = "receiving"
    # Batch work is stopped by a drain, not moved, so it asks nothing of the receivers.
    batch = {s.name for s in topology.services if s.kind is ServiceKind.BATCH}
    services = sorted({s for r in topology.regions for s in r.capacity_rps} - batch)
    reasons: list[str] = []
    per_region: dict[str, list[ServiceForecast]] = {r: [] for r in roles}
    for service in services:
        loads: dict[str, float] = {}
        for region, role in roles.items():
            value = _load(topology, health, region, service, len(services) == 1)
            if value is None:
                if role == "out":
                    value = 0.0  # a drained region reporting nothing serves nothing
                else:
                    reasons.append(f"no health data for {service} in {region}")
                    continue
            loads[region] = value
        caps = {
            r: topology.region(r).capacity_rps.get(service, 0.0)
            for r, role in roles.items()
            if role == "receiving"
            and topology.region(r).capacity_rps.get(service, 0.0) > 0
            and r in loads
        }
        moving = sum(v for r, v in loads.items() if roles[r] != "receiving")
        if moving > 0 and not caps:
            reasons.append(f"no active region left to take {moving:.0f} rps of {service}")
        extra = _spread(moving, {r: loads[r] for r in caps}, caps, spread)
        for region, role in roles.items():
            cap = topology.region(region).capacity_rps.get(service, 0.0)
            before = loads.get(region)
            if before is None:
                continue
            after = before + extra.get(region, 0.0) if role == "receiving" else 0.0
            per_region[region].append(
                ServiceForecast(
                    service=service,
                    capacity_rps=cap,
                    load_before_rps=before,
                    load_after_rps=after,
                    utilization_before=before / cap if cap > 0 else None,
                    utilization_after=after / cap if cap > 0 else None,
                )
            )
    forecasts: list[RegionForecast] = []
    worst: tuple[float, str] | None = None
    for region, role in roles.items():
        entries = per_region[region]
        befores = [e.utilization_before for e in entries if e.utilization_before is not None]
        afters = [e.utilization_after for e in entries if e.utilization_after is not None]
        peak = max(afters) if afters else None
        forecasts.append(
            RegionForecast(
                region=region,
                role=role,
                utilization_before=max(befores) if befores else None,
                utilization_after=peak,
                services=entries,
            )
        )
        if role == "receiving" and peak is not None and (worst is None or peak > worst[0]):
            worst = (peak, region)
        if role == "receiving":
            for item in entries:
                if item.utilization_after is not None and item.utilization_after > target:
                    reasons.append(
                        f"{region} would run {item.service} at {item.utilization_after:.2f} "
                        f"(> target {target:.2f}; {item.load_after_rps:.0f} of "
                        f"{item.capacity_rps:.0f} rps)"
                    )
    return DrainForecast(
        draining=sorted(draining),
        running=sorted(running_set),
        target_utilization=target,
        spread=spread,
        regions=forecasts,
        safe=not reasons,
        worst_region=worst[1] if worst else None,
        worst_utilization=worst[0] if worst else None,
        reasons=reasons,
    )


def check_drain_capacity(
    topology: Topology,
    health: HealthReport,
    drain: Sequence[str],
    running: Sequence[str] = (),
    *,
    target: float = DEFAULT_TARGET_UTILIZATION,
    spread: Spread = "spare",
) -> DrainForecast:
    """The forecast when the drain is safe; else :class:`DrainRefused` (an
    :class:`UnsafeRequest`) whose message and ``forecast`` give the numbers.

    A region already being drained by a running drain cannot be drained again.
    """
    overlap = sorted(set(drain) & set(running))
    if overlap:
        raise UnsafeRequest(
            f"region(s) {', '.join(overlap)} already being drained by a running drain"
        )
    forecast = forecast_drain(topology, health, drain, running, target=target, spread=spread)
    if forecast.safe:
        return forecast
    together = (
        f" together with running drain(s) of {', '.join(forecast.running)}" if running else ""
    )
    raise DrainRefused(
        f"refusing to drain {', '.join(forecast.draining)}{together}: "
        + "; ".join(forecast.reasons)
        + f"; {forecast.summary()}",
        forecast,
    )
