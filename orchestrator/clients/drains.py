"""Which drains are running, and the capacity forecast of one more.

Running drains are found two ways, because either alone misses some: Temporal
visibility (drain runbooks still running on this task queue, by their Region
search attribute) and the rebalancer's override holders (``runbook:<region>``,
which outlive a finished drain: a drained region stays out until restored).
The CLI calls :func:`drain_forecast` for ``--dry-run``; the drain's first activity
calls it too, so a drain started by a trigger is checked the same way.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from orchestrator.contracts.drain import DrainCheckInput
from orchestrator.contracts.rebalancer import REBALANCER_ID, RebalancerStatus
from orchestrator.contracts.runbook import override_owner
from orchestrator.exceptions import InvalidInstance
from orchestrator.fleet.protocol import Fleet
from orchestrator.policy.drain.capacity import DrainForecast, check_drain_capacity, forecast_drain
from orchestrator.temporal import REGION

__all__ = ["HOLD", "drain_forecast", "running_drains"]

HOLD = "override held by"

#: a running rebalancer whose workers are all down cannot answer; the check goes on without it
REBALANCER_QUERY_TIMEOUT = timedelta(seconds=10)


async def running_drains(
    client: Client,
    *,
    exclude_id: str = "",
    task_queue: str = "",
    rebalancer_id: str = REBALANCER_ID,
) -> dict[str, str]:
    """Region -> what drains it (a workflow id, or an override holder)."""
    found: dict[str, str] = {}
    query = "RunKind = 'drain' AND ExecutionStatus = 'Running'"
    if task_queue:
        query += f" AND TaskQueue = '{task_queue}'"
    async for execution in client.list_workflows(query):
        region = execution.typed_search_attributes.get(REGION)
        if execution.id != exclude_id and region:
            found.setdefault(region, execution.id)
    handle = client.get_workflow_handle(rebalancer_id)
    try:
        # A closed rebalancer holds nothing (its last table is the routing the check reads),
        # and a query to a closed run waits for a worker of its task queue to replay it.
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            return found
        status = await handle.query(
            "status", result_type=RebalancerStatus, rpc_timeout=REBALANCER_QUERY_TIMEOUT
        )
    except RPCError:
        return found  # no rebalancer, or none answering: nothing can be held
    for held in status.overrides:
        if held.owner == override_owner(held.region) and held.max_share is not None:
            found.setdefault(held.region, f"{HOLD} {held.owner}: {held.reason}")
    return found


async def drain_forecast(
    fleet: Fleet, client: Client, inp: DrainCheckInput, *, check: bool = True
) -> tuple[DrainForecast, dict[str, str]]:
    """The forecast of draining ``inp.region`` with the running drains; with ``check``
    a :class:`~orchestrator.policy.drain.capacity.DrainRefused` when it is unsafe."""
    # Read at once: the check is on every drain's path before its first step. The routing
    # table lets the check estimate a drained region whose health is missing.
    running, topology, health, routing = await asyncio.gather(
        running_drains(client, exclude_id=inp.workflow_id, task_queue=inp.task_queue),
        fleet.topology(),
        fleet.health(),
        fleet.routing(),
    )
    if running.get(inp.region, "").startswith(HOLD):
        # The region's own hold (a finished earlier drain of it) is not a second drain.
        del running[inp.region]
    moving: dict[str, float] = {}
    if inp.building:
        try:
            building = topology.building(inp.building)
        except KeyError:
            raise InvalidInstance(f"building: unknown building {inp.building!r}") from None
        if building.region != inp.region:
            raise InvalidInstance(
                f"building: {inp.building} is in {building.region}, not {inp.region}"
            )
        moving[inp.region] = topology.building_share(inp.building)
    others = sorted(running)
    check_or_forecast = check_drain_capacity if check else forecast_drain
    forecast = check_or_forecast(
        topology,
        health,
        [inp.region],
        others,
        target=inp.target,
        routing=routing,
        moving_share=moving,
    )
    return forecast, running
