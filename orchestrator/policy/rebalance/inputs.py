"""From what the fleet reports to a solver instance, refusing to act on bad data.

The rebalancer never shifts traffic on inputs it cannot trust: a region with no
samples, a utilization that cannot be, demand that does not add up. Each of
those skips the epoch with a reason an operator can read. Overrides (from
drains and load tests) become per-region caps here, and
:func:`override_refusal` decides, from the last trusted view of the fleet,
whether a new override would leave the others unable to carry the load.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, model_validator

from orchestrator.models import (
    Fraction,
    HealthReport,
    RegionStatus,
    RoutingTable,
    StrictModel,
    Topology,
)
from orchestrator.policy.rebalance.model import (
    Constraints,
    PopInput,
    RegionInput,
    SolverInstance,
    SolverResult,
)
from orchestrator.policy.rebalance.taiji import fraction_violations
from orchestrator.policy.snapshot import idle_regions

__all__ = [
    "FleetView",
    "Override",
    "RegionView",
    "SkipEpoch",
    "broken_holds",
    "build_instance",
    "fleet_view",
    "override_refusal",
    "restore_table",
]

#: A measured utilization above this is a broken meter, not a busy region.
IMPLAUSIBLE_UTILIZATION = 5.0
#: A cap (max_share) counts as broken when the table gives the region this much more share
#: of demand; a pin when the table misses it by this much (demand moves a pinned share a
#: little between windows: that is the next epoch's ordinary work, not an emergency).
CAP_SLACK = 0.01
PIN_SLACK = 0.05


class SkipEpoch(Exception):
    """The inputs cannot be trusted this epoch; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Override(StrictModel):
    """An owner's hold on a region: a cap on its share or on the capacity it may use."""

    region: str
    owner: str = Field(min_length=1)
    reason: str = ""
    #: the region gets at most this share of all demand (0 drains it)
    max_share: Fraction | None = None
    #: the region gets exactly this share of all demand (a load test's lever)
    pin_share: Fraction | None = None
    #: only this fraction of the region's capacity may be used
    capacity_fraction: Fraction | None = None
    set_at: datetime | None = None

    @model_validator(mode="after")
    def _one_lever(self) -> Override:
        levers = [self.max_share, self.pin_share, self.capacity_fraction]
        if sum(v is not None for v in levers) != 1:
            raise ValueError("set exactly one of max_share, pin_share, capacity_fraction")
        return self


class RegionView(StrictModel):
    name: str
    status: RegionStatus
    capacity: float
    load: float
    utilization: float | None


class FleetView(StrictModel):
    """The last trusted picture of the fleet, kept by the rebalancer for its validators."""

    regions: list[RegionView]
    total_demand: float
    observed_at: datetime


def _service_metrics(
    health: HealthReport, region: str, service: str
) -> tuple[float | None, float | None, int]:
    for entry in health.services:
        if entry.region == region and entry.service == service:
            return entry.rps, entry.utilization, entry.samples
    h = health.region(region)
    return h.rps, h.utilization, h.samples


def fleet_view(
    topology: Topology, routing: RoutingTable, health: HealthReport, service: str = "web"
) -> FleetView:
    """Per region capacity, load and utilization, raising :class:`SkipEpoch` on bad data."""
    idle = idle_regions(topology, routing, health)
    regions = []
    for region in topology.regions:
        rps, utilization, samples = _service_metrics(health, region.name, service)
        capacity = region.capacity_rps.get(service, 0.0)
        if samples == 0 and region.name in idle:
            # Silent because the table sends it (next to) nothing: drained by an override,
            # or a sliver of one PoP under one request per window. A known zero, not
            # missing data (many drains and load tests at once leave such slivers).
            rps, utilization = 0.0, 0.0
        elif region.status is RegionStatus.ACTIVE:
            if samples == 0 or utilization is None or rps is None:
                raise SkipEpoch(f"region {region.name}: no {service} samples in the window")
            if not 0.0 <= utilization <= IMPLAUSIBLE_UTILIZATION:
                raise SkipEpoch(f"region {region.name}: implausible utilization {utilization:.2f}")
            if capacity <= 0:
                raise SkipEpoch(f"region {region.name}: no {service} capacity in the topology")
        regions.append(
            RegionView(
                name=region.name,
                status=region.status,
                capacity=capacity,
                load=rps or 0.0,
                utilization=utilization,
            )
        )
    total = sum(r.load for r in regions)
    if total <= 0:
        raise SkipEpoch(f"no {service} traffic measured in any region")
    return FleetView(regions=regions, total_demand=total, observed_at=health.observed_at)


def _pop_demand(topology: Topology, health: HealthReport, total: float) -> dict[str, float]:
    measured = {p.pop: p.rps for p in health.pops if p.samples > 0 and p.rps is not None}
    if len(measured) == len(topology.pops) and sum(measured.values()) > 0:
        return {name: rps or 0.0 for name, rps in measured.items()}
    # Not every PoP reported: spread the measured total by the configured weights
    # rather than treat a silent PoP as one without users.
    weight = sum(p.demand_weight for p in topology.pops)
    return {p.name: total * p.demand_weight / weight for p in topology.pops}


def build_instance(
    topology: Topology,
    routing: RoutingTable,
    health: HealthReport,
    overrides: list[Override],
    constraints: Constraints,
    service: str = "web",
) -> tuple[SolverInstance, FleetView]:
    """The solver instance for this epoch; :class:`SkipEpoch` when inputs are not trustworthy."""
    view = fleet_view(topology, routing, health, service)
    known = set(topology.region_names)
    for pop in topology.pops:
        if pop.name not in routing.fractions:
            raise SkipEpoch(f"routing has no entry for pop {pop.name}")
        unknown = set(routing.fractions[pop.name]) - known
        if unknown:
            raise SkipEpoch(f"routing sends pop {pop.name} to unknown region {sorted(unknown)[0]}")
    demand = _pop_demand(topology, health, view.total_demand)
    by_region = {o.region: o for o in overrides}
    regions = []
    for r in view.regions:
        o = by_region.get(r.name)
        regions.append(
            RegionInput(
                name=r.name,
                capacity=r.capacity,
                utilization=r.utilization or 0.0,
                status=r.status,
                # A pin is exact: a floor (min_share) and a cap (max_share) at the same share.
                max_share=(o.pin_share if o.pin_share is not None else o.max_share) if o else None,
                min_share=o.pin_share if o else None,
                capacity_fraction=o.capacity_fraction if o else None,
            )
        )
    pops = [
        PopInput(
            name=pop.name,
            demand=demand[pop.name],
            rtt_ms={r: pop.rtt_ms.get(r, 1e4) for r in topology.region_names},
            fractions={r: f for r, f in routing.fractions[pop.name].items() if f > 0},
            buckets=(routing.buckets or {}).get(pop.name),
        )
        for pop in topology.pops
    ]
    instance = SolverInstance(regions=regions, pops=pops, constraints=constraints)
    return instance, view


def broken_holds(instance: SolverInstance, overrides: list[Override]) -> list[str]:
    """The holds that the instance's current table breaks, each in words.

    A table that breaks a hold was not written by a rebalancer enforcing it: the fleet
    lost its state, or someone else wrote it. Shares are of the instance's demand.
    """
    total = sum(p.demand for p in instance.pops)
    if total <= 0:
        return []
    shares: dict[str, float] = {}
    for pop in instance.pops:
        for region, fraction in pop.fractions.items():
            shares[region] = shares.get(region, 0.0) + pop.demand * fraction / total
    broken = []
    for o in overrides:
        share = shares.get(o.region, 0.0)
        if o.max_share is not None and share > o.max_share + CAP_SLACK:
            broken.append(
                f"{o.region} carries {share:.1%} of demand, over the {o.max_share:.1%} "
                f"cap held by {o.owner}"
            )
        if o.pin_share is not None and abs(share - o.pin_share) > PIN_SLACK:
            broken.append(
                f"{o.region} carries {share:.1%} of demand, not the {o.pin_share:.1%} "
                f"pinned by {o.owner}"
            )
    return broken


def restore_table(
    instance: SolverInstance, solved: SolverResult, fractions: dict[str, dict[str, float]]
) -> SolverResult | str:
    """``solved`` with ``fractions`` put back, or why they no longer fit the constraints."""
    table = {pop.name: dict(fractions.get(pop.name, {})) for pop in instance.pops}
    problems = fraction_violations(instance, table)
    if problems:
        return "; ".join(problems[:2])
    total = sum(p.demand for p in instance.pops) or 1.0
    load = dict.fromkeys(instance.region_names(), 0.0)
    for pop in instance.pops:
        for region, share in table[pop.name].items():
            load[region] += pop.demand * share
    current = {p.name: p.fractions for p in instance.pops}
    moved = sum(
        p.demand
        * sum(abs(table[p.name].get(r, 0.0) - current[p.name].get(r, 0.0)) for r in load)
        / 2
        for p in instance.pops
    )
    capacity = {r.name: r.capacity for r in instance.regions}
    regions = [
        r.model_copy(
            update={
                "share_after": load[r.name] / total,
                "utilization_after": load[r.name] / capacity[r.name] if capacity[r.name] else 0.0,
            }
        )
        for r in solved.regions
    ]
    active = [r.utilization_after for r in regions if r.status is RegionStatus.ACTIVE]
    return solved.model_copy(
        update={
            "fractions": {p: {r: f for r, f in s.items() if f > 0} for p, s in table.items()},
            "regions": regions,
            "pops": [],
            "max_utilization": max(active, default=0.0),
            "traffic_moved": moved,
            "traffic_moved_share": moved / total,
            "churn": None,
            "min_churn": None,
        }
    )


def override_refusal(
    view: FleetView, overrides: list[Override], new: Override, target_utilization: float
) -> str | None:
    """Why ``new`` must be refused, or None when the fleet can still carry the load.

    With every override applied, the demand must fit in what the regions may
    still take at the target utilization.
    """
    by_region = {o.region: o for o in overrides if o.region != new.region}
    by_region[new.region] = new
    if new.region not in {r.name for r in view.regions}:
        return f"unknown region {new.region}"
    room = 0.0
    for r in view.regions:
        if r.status is not RegionStatus.ACTIVE:
            continue
        usable = r.capacity * target_utilization
        o = by_region.get(r.name)
        if o is not None:
            if o.capacity_fraction is not None:
                usable = r.capacity * o.capacity_fraction * target_utilization
            share = o.pin_share if o.pin_share is not None else o.max_share
            if share is not None:
                usable = min(usable, share * view.total_demand)
        room += usable
    if view.total_demand > room + 1e-9:
        return (
            f"the other regions could not take the load: demand {view.total_demand:.1f}, "
            f"room at utilization {target_utilization:.0%} is {room:.1f}"
        )
    return None
