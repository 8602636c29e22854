"""A routing table that gives one region a chosen share of demand, with the least change.

What a load test writes when no rebalancer runs: every PoP moves the same proportion
of its traffic towards (or away from) the region, and the other regions keep their
proportions to each other. No solver, no rebalancing on the side: the test moves its
region's load and nothing else, and a region that got nothing (drained) still gets
nothing. Pure: the same inputs give the same table, so a retried write sends the same
body under the same idempotency key.
"""

from __future__ import annotations

from orchestrator.exceptions import InvalidInstance
from orchestrator.models import Topology

__all__ = ["pinned_table", "region_share"]


def region_share(topology: Topology, fractions: dict[str, dict[str, float]], region: str) -> float:
    """The region's share of demand under ``fractions`` (PoPs weighted by demand)."""
    total = sum(p.demand_weight for p in topology.pops) or 1.0
    return (
        sum(p.demand_weight * fractions.get(p.name, {}).get(region, 0.0) for p in topology.pops)
        / total
    )


def pinned_table(
    topology: Topology, base: dict[str, dict[str, float]], region: str, share: float
) -> dict[str, dict[str, float]]:
    """``base`` with ``region`` carrying ``share`` of demand.

    Raising: each PoP sends the fraction ``a`` of what it sends elsewhere to the region,
    with ``a`` the same everywhere. Lowering: each PoP keeps the fraction ``b`` of what it
    sends to the region and gives the rest to its other regions in their proportions (a
    PoP with no other region gives it to the regions the rest of the fleet uses).
    """
    if region not in topology.region_names:
        raise InvalidInstance(f"region: {region!r} is not in the topology")
    if not 0.0 <= share <= 1.0:
        raise InvalidInstance(f"share: {share} is not within [0, 1]")
    now = region_share(topology, base, region)
    table = {pop: dict(shares) for pop, shares in base.items()}
    if share >= now:
        a = (share - now) / (1.0 - now) if now < 1.0 else 0.0
        for shares in table.values():
            for other in [r for r in shares if r != region]:
                shares[other] *= 1.0 - a
            shares[region] = shares.get(region, 0.0) + a * (1.0 - shares.get(region, 0.0))
        return _clean(table)
    b = share / now
    elsewhere = _shares_elsewhere(topology, base, region)
    for shares in table.values():
        given = shares.get(region, 0.0) * (1.0 - b)
        others = {r: f for r, f in shares.items() if r != region and f > 0}
        weights = others or elsewhere
        total = sum(weights.values())
        for other, weight in weights.items():
            shares[other] = shares.get(other, 0.0) + given * weight / total
        shares[region] = shares.get(region, 0.0) * b
    return _clean(table)


def _shares_elsewhere(
    topology: Topology, base: dict[str, dict[str, float]], region: str
) -> dict[str, float]:
    shares = {r: region_share(topology, base, r) for r in topology.region_names if r != region}
    used = {r: s for r, s in shares.items() if s > 0}
    if not used:
        raise InvalidInstance(f"share: no region but {region} carries traffic to take it over")
    return used


def _clean(table: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Drop zero entries and renormalise each PoP against floating-point drift."""
    cleaned = {}
    for pop, shares in table.items():
        kept = {r: f for r, f in shares.items() if f > 1e-12}
        total = sum(kept.values())
        cleaned[pop] = {r: f / total for r, f in kept.items()}
    return cleaned
