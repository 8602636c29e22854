"""A load test's touches of the world: the baseline, each window's health, the routing check.

Every activity is a read, so a retry is harmless. Health is judged here (bands
per metric) so the workflow history holds only the readings, never a full report.
"""

from __future__ import annotations

from temporalio import activity

from orchestrator.activities.errors import reported
from orchestrator.contracts.load_test import (
    LoadTestBaseline,
    ObserveInput,
    PrepareInput,
    RoutingCheck,
    RoutingCheckInput,
    StepObservation,
)
from orchestrator.exceptions import InvalidInstance
from orchestrator.fleet.protocol import Fleet
from orchestrator.models import HealthReport, RoutingTable
from orchestrator.policy.health_metrics import evaluate_health
from orchestrator.policy.kraken import theoretical_capacity
from orchestrator.policy.snapshot import traffic_shares

__all__ = ["LoadTestActivities", "routing_difference", "service_loads"]


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
        return RoutingCheck(
            identical=difference <= inp.tolerance, max_difference=difference, version=table.version
        )
