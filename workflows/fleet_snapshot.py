"""FleetSnapshotWorkflow: read topology, routing and health, and summarise them."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.fleet_reads import FleetReadActivities, ReadHealthInput
    from orchestrator.exceptions import NON_RETRYABLE_ERROR_TYPES
    from orchestrator.policy.snapshot import FleetSnapshot, summarize

READ_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
    non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
)


class FleetSnapshotInput(BaseModel):
    window_s: float | None = Field(default=None, gt=0)
    service: str = "web"


@workflow.defn
class FleetSnapshotWorkflow:
    @workflow.run
    async def run(self, inp: FleetSnapshotInput) -> FleetSnapshot:
        timeout = timedelta(seconds=30)
        topology = await workflow.execute_activity_method(
            FleetReadActivities.read_topology,
            start_to_close_timeout=timeout,
            retry_policy=READ_RETRY,
        )
        routing = await workflow.execute_activity_method(
            FleetReadActivities.read_routing,
            start_to_close_timeout=timeout,
            retry_policy=READ_RETRY,
        )
        health = await workflow.execute_activity_method(
            FleetReadActivities.read_health,
            ReadHealthInput(window_s=inp.window_s),
            start_to_close_timeout=timeout,
            retry_policy=READ_RETRY,
        )
        return summarize(topology, routing, health, inp.service)
