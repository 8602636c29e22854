"""A region the routing table sends (next to) nothing has nothing to report: its silence is
a known zero for the rebalancer's view, not missing data (issue 24: many runs at once)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.lab.config import load_config
from orchestrator.models import HealthReport, PopHealth, RegionHealth, RoutingTable, ServiceHealth
from orchestrator.policy.rebalance.inputs import SkipEpoch, fleet_view
from orchestrator.policy.snapshot import idle_regions

#: nyc sends a sliver of its traffic to eu-west; nobody else sends it anything
SLIVER = 0.001


def routing(eu_share_of_nyc: float) -> RoutingTable:
    topology = load_config().topology()
    fractions = {p.name: {"us-east": 0.5, "us-west": 0.5} for p in topology.pops}
    if eu_share_of_nyc:
        fractions["nyc"] = {
            "us-east": 0.5 - eu_share_of_nyc,
            "us-west": 0.5,
            "eu-west": eu_share_of_nyc,
        }
    return RoutingTable(version=3, fractions=fractions)


def health(eu_samples: int, window_s: float = 10.0) -> HealthReport:
    """100 rps at the edge; eu-west reports ``eu_samples`` web samples."""
    regions, services = [], []
    for name in ("us-east", "us-west", "eu-west"):
        samples = eu_samples if name == "eu-west" else 500
        rps = None if samples == 0 else samples / window_s
        util = None if samples == 0 else 0.4
        regions.append(RegionHealth(region=name, rps=rps, utilization=util, samples=samples))
        services.append(
            ServiceHealth(region=name, service="web", rps=rps, utilization=util, samples=samples)
        )
    pops = [
        PopHealth(pop=p, rps=100.0 / 6, samples=167)
        for p in ("nyc", "chi", "sfo", "sea", "lon", "fra")
    ]
    return HealthReport(
        window_s=window_s,
        observed_at=datetime.now(UTC),
        regions=regions,
        services=services,
        pops=pops,
    )


class TestIdleRegions:
    """Idle: the table sends a region under one request in the window."""

    def test_drained_and_sliver_regions_are_idle_others_not(self) -> None:
        topology = load_config().topology()
        assert idle_regions(topology, routing(0.0), health(0)) == {"eu-west"}
        # 0.001 of nyc's ~33 rps is 0.03 rps: 0.3 requests in 10 s
        assert idle_regions(topology, routing(SLIVER), health(0)) == {"eu-west"}
        # a tenth of nyc's: 3.3 rps, 33 requests expected: not idle
        assert idle_regions(topology, routing(0.1), health(0)) == set()

    def test_no_demand_observed_only_unrouted_regions_are_idle(self) -> None:
        topology = load_config().topology()
        silent = health(0).model_copy(update={"pops": [], "regions": []})
        assert idle_regions(topology, routing(SLIVER), silent) == set()
        assert idle_regions(topology, routing(0.0), silent) == {"eu-west"}


class TestRebalancerView:
    """The rebalancer's view trusts a silent region the table sends a sliver, not one it
    sends real traffic."""

    def test_sliver_with_no_samples_is_a_known_zero(self) -> None:
        topology = load_config().topology()
        view = fleet_view(topology, routing(SLIVER), health(0))
        eu = next(r for r in view.regions if r.name == "eu-west")
        assert eu.load == 0.0 and eu.utilization == 0.0

    def test_routed_region_with_no_samples_is_missing_data(self) -> None:
        topology = load_config().topology()
        with pytest.raises(SkipEpoch, match="eu-west: no web samples"):
            fleet_view(topology, routing(0.1), health(0))
