from __future__ import annotations

import uuid

import pytest
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.fleet_reads import FleetReadActivities
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.memory import MemoryFleet
from orchestrator.lab.server import LabThread
from tests.fixtures.temporal import new_worker
from workflows.fleet_snapshot import FleetSnapshotInput, FleetSnapshotWorkflow


async def snapshot_on(env: WorkflowEnvironment, lab: LabThread) -> None:
    fleet = HttpFleet(lab.url)
    reads = FleetReadActivities(fleet)
    worker = new_worker(env.client, [reads.read_topology, reads.read_routing, reads.read_health])
    async with worker:
        result = await env.client.execute_workflow(
            FleetSnapshotWorkflow.run,
            FleetSnapshotInput(window_s=5),
            id=f"snapshot-{uuid.uuid4().hex[:8]}",
            task_queue=worker.task_queue,
        )
    await fleet.aclose()
    assert [r.region for r in result.regions] == ["us-east", "us-west", "eu-west"]
    assert sum(r.traffic_share for r in result.regions) == pytest.approx(1.0, abs=1e-5)
    assert all(r.rps is not None and r.rps > 0 for r in result.regions)
    # Nearest-region routing leaves the regions unevenly loaded.
    assert result.utilization_spread is not None and result.utilization_spread > 0.1
    assert result.missing == []


class TestFleetSnapshot:
    """The platform's first workflow runs through the whole stack on both Temporal servers."""

    async def test_on_dev_server(self, dev_env: WorkflowEnvironment, model_lab: LabThread) -> None:
        await snapshot_on(dev_env, model_lab)

    async def test_on_time_skipping_server(
        self, time_env: WorkflowEnvironment, model_lab: LabThread
    ) -> None:
        await snapshot_on(time_env, model_lab)


class TestReadRoutingCarriesNoBuckets:
    """The routing a workflow reads is the fractions only: bucket lists (which the fleet
    realises) would make every read a payload of PoPs x buckets entries."""

    async def test_buckets_left_out(self) -> None:
        fleet = MemoryFleet()
        try:
            assert (await fleet.routing()).buckets is not None
            table = await FleetReadActivities(fleet).read_routing()
            assert table.buckets is None and table.fractions == (await fleet.routing()).fractions
        finally:
            await fleet.aclose()
