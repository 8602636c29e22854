"""A one-glance summary of the fleet: per region, its share of traffic and its health."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from orchestrator.models import HealthReport, RegionStatus, RoutingTable, StrictModel, Topology

__all__ = ["FleetSnapshot", "RegionSnapshot", "idle_regions", "summarize", "traffic_shares"]


class RegionSnapshot(StrictModel):
    region: str
    status: RegionStatus
    #: demand-weighted share of all user traffic the routing table sends here
    traffic_share: float
    capacity_rps: float
    rps: float | None
    utilization: float | None
    p99_ms: float | None
    error_rate: float | None
    samples: int


class FleetSnapshot(StrictModel):
    observed_at: datetime
    window_s: float
    routing_version: int
    regions: list[RegionSnapshot]
    #: regions that reported no samples in the window (missing, not zero)
    missing: list[str] = Field(default_factory=list)
    max_utilization: float | None = None
    #: max minus min utilization over active regions with data
    utilization_spread: float | None = None


def traffic_shares(topology: Topology, routing: RoutingTable) -> dict[str, float]:
    total = sum(p.demand_weight for p in topology.pops)
    shares = dict.fromkeys(topology.region_names, 0.0)
    for pop in topology.pops:
        for region, fraction in routing.fractions.get(pop.name, {}).items():
            if region in shares:
                shares[region] += pop.demand_weight * fraction / total
    return shares


def idle_regions(topology: Topology, routing: RoutingTable, health: HealthReport) -> set[str]:
    """Regions the routing table sends under one request in the health window.

    Their silence is the table's doing (a region drained by an override, the sliver of
    one PoP a solver left there), so a check that finds no data there has nothing to
    judge rather than data missing. Demand is what the edge observed (the PoPs' rps,
    else the regions'); with none observed, only regions the table sends nothing are idle.
    """
    shares = traffic_shares(topology, routing)
    demand = sum(p.rps for p in health.pops if p.rps) or sum(r.rps for r in health.regions if r.rps)
    expected = {r: share * demand * health.window_s for r, share in shares.items()}
    if demand <= 0:
        return {r for r, share in shares.items() if share <= 0.0}
    return {r for r, n in expected.items() if n < 1.0}


def summarize(
    topology: Topology, routing: RoutingTable, health: HealthReport, service: str = "web"
) -> FleetSnapshot:
    shares = traffic_shares(topology, routing)
    regions = []
    for region in topology.regions:
        h = health.region(region.name)
        regions.append(
            RegionSnapshot(
                region=region.name,
                status=region.status,
                traffic_share=round(shares[region.name], 6),
                capacity_rps=region.capacity_rps.get(service, 0.0),
                rps=h.rps,
                utilization=h.utilization,
                p99_ms=h.p99_ms,
                error_rate=h.error_rate,
                samples=h.samples,
            )
        )
    active = [
        r.utilization
        for r in regions
        if r.status == RegionStatus.ACTIVE and r.utilization is not None
    ]
    return FleetSnapshot(
        observed_at=health.observed_at,
        window_s=health.window_s,
        routing_version=routing.version,
        regions=regions,
        missing=[r.region for r in regions if r.samples == 0],
        max_utilization=max(active) if active else None,
        utilization_spread=(max(active) - min(active)) if active else None,
    )
