"""MemoryFleet: the lab's fleet contract in memory (no server, no port), on a given clock."""

from __future__ import annotations

import pytest

from orchestrator.exceptions import InvalidRequest, VersionConflict
from orchestrator.lab.memory import MemoryFleet
from orchestrator.models import RoutingWrite, ServiceWeightChange


class TestContractInMemory:
    """Reads, writes, refusals and the audit log are the lab's; timestamps are the clock's
    (in a workflow test, the workflow's time)."""

    async def test_writes_apply_once_on_the_clock(self) -> None:
        now = [1_000.0]
        fleet = MemoryFleet(clock=lambda: now[0])
        try:
            table = await fleet.routing()
            write = RoutingWrite(fractions=table.fractions, reason="same")
            written = await fleet.write_routing(write, if_match=table.version, idempotency_key="k")
            now[0] = 2_000.0
            again = await fleet.write_routing(write, if_match=table.version, idempotency_key="k")
            assert again.version == written.version == table.version + 1
            with pytest.raises(VersionConflict):
                await fleet.write_routing(write, if_match=table.version, idempotency_key="k2")
            with pytest.raises(InvalidRequest):
                await fleet.set_service_weight(
                    ServiceWeightChange(region="mars", service="web", weight=0),
                    idempotency_key="k3",
                )
            entries = await fleet.audit()
            assert [(e.kind, e.at.timestamp()) for e in entries] == [("routing", 1_000.0)]
            assert (await fleet.health()).observed_at.timestamp() == 2_000.0
            assert fleet.runtime.state.routing.version == written.version
        finally:
            await fleet.aclose()
