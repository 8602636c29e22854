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
A pool at weight 0 (a service already drained in a region) serves nothing and
takes nothing, so it never counts as receiving capacity.

Missing health is treated by what the region does in the drain:

- a receiving region without data refuses the drain: nothing shows it can take
  more (a region just restored that the edge sends nothing yet is such a case);
- but a receiving region that reports (its region aggregate has samples) with one
  service silent served that service nothing in the window, which happens to a
  sticky service whose sessions are all pinned elsewhere (right after a load test
  moved its users away): that service is estimated from the edge as below, what the
  region's routing share will bring it once the sessions re-home;
- a region whose load moves away (the one being drained, or one a running drain
  takes out) without data is estimated from the edge, when the routing table is
  given: the PoPs' observed demand times the region's routing share, split over
  services by the fleet's observed per-request mix. That region is often the
  broken one whose metrics are gone, and what matters is how much load moves,
  which the edge observes; refusing would block exactly the drain that is needed.
  With no routing table, or no PoP demand observed, it still refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field

from orchestrator.exceptions import InvalidInstance, UnsafeRequest
from orchestrator.models import (
    HealthReport,
    RegionStatus,
    RoutingTable,
    ServiceKind,
    StrictModel,
    Topology,
)

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
    #: the load before came from edge demand x routing share, not from health
    estimated: bool = False


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
    #: what was estimated rather than observed, one line each
    notes: list[str] = Field(default_factory=list)

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


def _weight(topology: Topology, region: str, service: str) -> float:
    return topology.service_weights.get(f"{region}/{service}", 1.0)


def _edge_arrivals(
    topology: Topology, health: HealthReport, routing: RoutingTable, region: str
) -> float | None:
    """Requests per second the edge routes to ``region``: each PoP's observed demand
    times its routing share; a PoP without data gets its demand weight's share of the
    observed rate. ``None`` when no PoP's demand is observed."""
    observed = {p.pop: p.rps for p in health.pops if not p.missing and p.rps is not None}
    weights = {p.name: p.demand_weight for p in topology.pops}
    observed_weight = sum(weights.get(p, 0.0) for p in observed)
    if not observed or observed_weight <= 0:
        return None
    per_weight = sum(observed.values()) / observed_weight
    total = 0.0
    for pop, shares in routing.fractions.items():
        share = shares.get(region, 0.0)
        if share <= 0:
            continue
        rps = observed.get(pop)
        if rps is None:
            if pop not in weights:
                return None
            rps = weights[pop] * per_weight
        total += rps * share
    return total


def _request_mix(
    topology: Topology, health: HealthReport, service: str, only_service: bool
) -> float | None:
    """Load of ``service`` per request a region receives, over the regions observed."""
    service_rps = region_rps = 0.0
    for entry in health.regions:
        if entry.missing or entry.rps is None or entry.rps <= 0:
            continue
        load = _load(topology, health, entry.region, service, False)
        if load is not None:
            service_rps += load
            region_rps += entry.rps
    if region_rps > 0:
        return service_rps / region_rps
    return 1.0 if only_service else None


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
    routing: RoutingTable | None = None,
    moving_share: Mapping[str, float] | None = None,
) -> DrainForecast:
    """Every region's predicted utilization after draining ``drain`` (with ``running``
    drains also in effect); never raises for an unsafe result, see ``safe``. With
    ``routing``, a region whose load moves and has no health is estimated from the edge.
    ``moving_share`` (region -> share of its load, default 1) drains part of a region:
    one building's share moves, the rest stays and keeps its place in the forecast."""
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
    notes: list[str] = []
    per_region: dict[str, list[ServiceForecast]] = {r: [] for r in roles}
    estimated: set[tuple[str, str]] = set()
    for service in services:
        only = len(services) == 1
        loads: dict[str, float] = {}
        for region, role in roles.items():
            value = _load(topology, health, region, service, only)
            weight = _weight(topology, region, service)
            # A receiver is estimated only while its region reports: a service there with no
            # samples then served no request in the window (a sticky service whose sessions
            # are all pinned elsewhere, e.g. right after a load test), not a region gone dark.
            moves_or_reports = role in ("draining", "running-drain") or (
                role == "receiving" and not health.region(region).missing
            )
            if value is None and moves_or_reports and routing is not None:
                arrivals = _edge_arrivals(topology, health, routing, region)
                mix = _request_mix(topology, health, service, only)
                if arrivals is not None and mix is not None:
                    value = arrivals * mix * weight
                    estimated.add((region, service))
                    notes.append(
                        f"no health data for {service} in {region}: {value:.0f} rps estimated "
                        "from edge demand x routing share"
                    )
            if value is None:
                if role == "out" or (role == "receiving" and weight <= 0):
                    value = 0.0  # a drained region or pool reporting nothing serves nothing
                else:
                    unrouted = (
                        role == "receiving"
                        and routing is not None
                        and _edge_arrivals(topology, health, routing, region) == 0.0
                    )
                    # A region the edge sends nothing (e.g. just restored) has shown nothing yet.
                    why = " (the edge sends it no traffic yet)" if unrouted else ""
                    reasons.append(f"no health data for {service} in {region}{why}")
                    continue
            loads[region] = value
        caps = {
            r: topology.region(r).capacity_rps.get(service, 0.0)
            for r, role in roles.items()
            if role == "receiving"
            and topology.region(r).capacity_rps.get(service, 0.0) > 0
            and _weight(topology, r, service) > 0
            and r in loads
        }
        part = moving_share or {}
        moving = sum(v * part.get(r, 1.0) for r, v in loads.items() if roles[r] != "receiving")
        if moving > 0 and not caps:
            reasons.append(f"no active region left to take {moving:.0f} rps of {service}")
        extra = _spread(moving, {r: loads[r] for r in caps}, caps, spread)
        for region, role in roles.items():
            cap = topology.region(region).capacity_rps.get(service, 0.0)
            before = loads.get(region)
            if before is None:
                continue
            after = (
                before + extra.get(region, 0.0)
                if role == "receiving"
                else before * (1.0 - part.get(region, 1.0))
            )
            per_region[region].append(
                ServiceForecast(
                    service=service,
                    capacity_rps=cap,
                    load_before_rps=before,
                    load_after_rps=after,
                    utilization_before=before / cap if cap > 0 else None,
                    utilization_after=after / cap if cap > 0 else None,
                    estimated=(region, service) in estimated,
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
        notes=notes,
    )


def check_drain_capacity(
    topology: Topology,
    health: HealthReport,
    drain: Sequence[str],
    running: Sequence[str] = (),
    *,
    target: float = DEFAULT_TARGET_UTILIZATION,
    spread: Spread = "spare",
    routing: RoutingTable | None = None,
    moving_share: Mapping[str, float] | None = None,
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
    forecast = forecast_drain(
        topology,
        health,
        drain,
        running,
        target=target,
        spread=spread,
        routing=routing,
        moving_share=moving_share,
    )
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
