"""A load test's touches of the world: the baseline, each window's health, the routing check,
and, when no rebalancer runs, its own routing writes.

Reads are harmless to retry. The direct write (a test with no rebalancer to ask) carries
If-Match and an idempotency key, and derives its table from the table found at the start
only, so a retry sends the same body under the same key. Health is judged here (bands
per metric) so the workflow history holds only the readings, never a full report.
"""

from __future__ import annotations

from temporalio import activity

from orchestrator.activities.errors import reported
from orchestrator.contracts.load_test import (
    DirectWriteInput,
    DirectWriteResult,
    LoadTestBaseline,
    ObserveInput,
    PrepareInput,
    RoutingCheck,
    RoutingCheckInput,
    StepObservation,
)
from orchestrator.exceptions import InvalidInstance, VersionConflict
from orchestrator.fleet.protocol import Fleet
from orchestrator.models import HealthReport, RoutingTable, RoutingWrite, Topology
from orchestrator.policy.health_metrics import evaluate_health
from orchestrator.policy.loadtest.kraken import theoretical_capacity
from orchestrator.policy.rebalance.pin_table import pinned_table, region_share
from orchestrator.policy.snapshot import traffic_shares

__all__ = ["LoadTestActivities", "judge_restore", "routing_difference", "service_loads"]

#: share of demand a restored region may be off by beyond the ramp (rounding, buckets)
SHARE_SLACK = 0.005


def service_loads(health: HealthReport, service: str) -> dict[str, float]:
    """Per region, the service's load (rps, failures included: that is the offered load)."""
    loads: dict[str, float] = {}
    for entry in health.services:
        if entry.service == service:
            loads[entry.region] = entry.rps or 0.0
    return loads


def routing_difference(table: RoutingTable, fractions: dict[str, dict[str, float]]) -> float:
    """The largest difference of any PoP's share of any region between two tables."""
    worst = 0.0
    for pop in set(table.fractions) | set(fractions):
        now, then = table.fractions.get(pop, {}), fractions.get(pop, {})
        for region in set(now) | set(then):
            worst = max(worst, abs(now.get(region, 0.0) - then.get(region, 0.0)))
    return worst


class LoadTestActivities:
    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    @activity.defn(name="prepare_load_test")
    @reported
    async def prepare(self, inp: PrepareInput) -> LoadTestBaseline:
        topology = await self._fleet.topology()
        theoretical = theoretical_capacity(topology, inp.region, inp.service)
        routing = await self._fleet.routing()
        health = await self._fleet.health(inp.window_s)
        loads = service_loads(health, inp.service)
        total = sum(loads.values())
        if total <= 0:
            raise InvalidInstance(
                f"service: no {inp.service} traffic measured in any region over "
                f"{inp.window_s:g}s; a live load test needs live traffic to move"
            )
        shares = traffic_shares(topology, routing)
        return LoadTestBaseline(
            theoretical_capacity=theoretical,
            region_load=loads.get(inp.region, 0.0),
            total_demand=total,
            region_share=shares.get(inp.region, 0.0),
            routing_version=routing.version,
            fractions=routing.fractions,
        )

    @activity.defn(name="observe_load_test")
    @reported
    async def observe(self, inp: ObserveInput) -> StepObservation:
        health = await self._fleet.health(inp.window_s)
        expected = None
        if inp.expected_load is not None:
            samples = inp.expected_load * inp.window_s
            expected = {m.name: samples for m in inp.metrics}
        evaluation = evaluate_health(inp.metrics, health, expected_samples=expected)
        loads = service_loads(health, inp.service)
        return StepObservation(
            load=loads.get(inp.region, 0.0),
            total_demand=sum(loads.values()),
            readings=evaluation.readings,
        )

    @activity.defn(name="check_routing_restored")
    @reported
    async def check_routing(self, inp: RoutingCheckInput) -> RoutingCheck:
        table = await self._fleet.routing()
        difference = routing_difference(table, inp.fractions)
        check = RoutingCheck(
            identical=difference <= inp.tolerance, max_difference=difference, version=table.version
        )
        if inp.region is None:
            return check
        return judge_restore(inp, check, table, await self._fleet.topology())

    @activity.defn(name="write_routing_directly")
    @reported
    async def write_directly(self, inp: DirectWriteInput) -> DirectWriteResult:
        topology = await self._fleet.topology()
        fractions = inp.base
        if inp.share is not None:
            fractions = pinned_table(topology, inp.base, inp.region, inp.share)
        try:
            table = await self._fleet.write_routing(
                RoutingWrite(fractions=fractions, reason=inp.reason),
                if_match=inp.if_match,
                idempotency_key=inp.idempotency_key,
            )
        except VersionConflict:
            return DirectWriteResult(version=(await self._fleet.routing()).version, conflict=True)
        return DirectWriteResult(version=table.version)


def judge_restore(
    inp: RoutingCheckInput, check: RoutingCheck, table: RoutingTable, topology: Topology
) -> RoutingCheck:
    """Whether the routing counts as restored, in the terms of ``LoadTestResult``.

    The exact table found is always restored. Without a rebalancer (``ramp`` None) nothing
    else is. With one, the hold is released (the caller checked) and each table from the
    restore on may have moved the region by one ramp: the restore itself when the table
    found no longer fit and was re-solved, then every epoch published since. One ramp is
    ``ramp x capacity`` of the region up, or ``ramp x capacity`` of the others (whose rise
    takes the region's load) down, as shares of demand.
    """
    region = inp.region or ""
    share = region_share(topology, table.fractions, region)
    found = inp.baseline_share if inp.baseline_share is not None else share
    answer = check.model_copy(update={"region_share": share})
    if check.identical:
        return answer.model_copy(update={"restored": True, "how": "the table found, exactly"})
    off = f"{region} carries {share:.1%} of demand, {share - found:+.1%} from the {found:.1%} found"
    if inp.ramp is None or inp.released_version is None or not inp.total_demand:
        how = f"the table differs from the one found by up to {check.max_difference:.4f}; {off}"
        return answer.model_copy(update={"restored": False, "how": how})
    since = table.version - inp.released_version
    if since < 0:
        how = f"routing version went back to v{table.version} (restore was v{inp.released_version})"
        return answer.model_copy(update={"restored": False, "how": how})
    capacity = {r.name: r.capacity_rps.get(inp.service, 0.0) for r in topology.regions}
    up = inp.ramp * capacity.get(region, 0.0) / inp.total_demand
    down = inp.ramp * sum(c for r, c in capacity.items() if r != region) / inp.total_demand
    allowed = (since + 1) * (up if share >= found else down) + SHARE_SLACK
    restored = abs(share - found) <= allowed
    how = (
        f"hold released; the rebalancer published {since} table(s) since the restore; {off} "
        f"(allowed {allowed:.1%}: one ramp per table from the restore on)"
    )
    return answer.model_copy(update={"restored": restored, "how": how})
