"""The epoch that releases a hold puts the table found back only while it still fits."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from structlog.testing import capture_logs

from orchestrator.activities.rebalance import PlanEpochInput, plan
from orchestrator.lab.memory import MemoryFleet
from orchestrator.models import HealthReport, RoutingTable, Topology

Fleet = tuple[Topology, RoutingTable, HealthReport]


@pytest_asyncio.fixture
async def fleet() -> AsyncIterator[Fleet]:
    """The shipped lab in model mode, read once."""
    lab = MemoryFleet()
    try:
        yield await lab.topology(), await lab.routing(), await lab.health(10)
    finally:
        await lab.aclose()


def urgent(restore: dict[str, dict[str, float]]) -> PlanEpochInput:
    return PlanEpochInput(urgent=True, window_s=10, restore_fractions=restore)


class TestRestoreTable:
    """A table that still meets every constraint is published verbatim; one that no longer
    does is solved instead, and the plan's note and the worker's log say which
    constraint it broke (a load test reports that routing as not restored)."""

    async def test_the_table_found_is_put_back_verbatim(self, fleet: Fleet) -> None:
        topology, routing, health = fleet
        found = routing.fractions
        planned = plan(urgent(found), topology, routing, health)
        assert planned.note == "restored the table found before the override"
        assert planned.result is not None
        assert {
            pop: {r: round(f, 9) for r, f in shares.items() if f > 0}
            for pop, shares in planned.result.fractions.items()
        } == {
            pop: {r: round(f, 9) for r, f in shares.items() if f > 0}
            for pop, shares in found.items()
        }

    async def test_a_table_that_no_longer_fits_is_solved_with_the_reason(
        self, fleet: Fleet
    ) -> None:
        topology, routing, health = fleet
        # every PoP on one region: far over its target utilization
        crowded = {pop: {"us-east": 1.0} for pop in routing.fractions}
        with capture_logs() as logs:
            planned = plan(urgent(crowded), topology, routing, health)
        assert planned.note.startswith("previous table not restored (utilization.us-east")
        assert planned.note.endswith("; solved instead")
        assert planned.result is not None and planned.result.fractions != crowded
        warned = [e for e in logs if e["event"] == "previous table not restored"]
        assert len(warned) == 1 and warned[0]["reason"].startswith("utilization.us-east")
