"""The capacity check a drain runs before it changes anything.

Running drains are found two ways, because either alone misses some: Temporal
visibility (drain runbooks still running on this task queue, by their Region
search attribute) and the rebalancer's override holders (``runbook:<region>``,
which outlive a finished drain: a drained region stays out until restored).
The CLI calls :func:`drain_forecast` for ``--dry-run``; the workflow calls the
activity as its first step, so a drain started by a trigger is checked too.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from orchestrator.activities.errors import reported
from orchestrator.contracts.rebalancer import REBALANCER_ID, RebalancerStatus
from orchestrator.contracts.runbook import (
    DrainRecord,
    RunbookReport,
    override_owner,
    runbook_result,
)
from orchestrator.fleet.protocol import Fleet
from orchestrator.policy.drain_capacity import (
    DEFAULT_TARGET_UTILIZATION,
    DrainForecast,
    check_drain_capacity,
    forecast_drain,
)
from orchestrator.temporal import REGION

__all__ = [
    "DrainActivities",
    "DrainCheckInput",
    "DrainRecordInput",
    "drain_forecast",
    "running_drains",
]

HOLD = "override held by"


class DrainCheckInput(BaseModel):
    region: str = Field(min_length=1)
    #: the drain asking, left out of the running drains
    workflow_id: str = ""
    target: float = Field(default=DEFAULT_TARGET_UTILIZATION, gt=0, le=1)
    #: only drains on this task queue count (one deployment); empty: every queue
    task_queue: str = ""


class DrainRecordInput(BaseModel):
    region: str = Field(min_length=1)
    #: the drain run to read; empty: the newest finished drain of the region
    workflow_id: str = ""
    task_queue: str = ""


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
    a :class:`~orchestrator.policy.drain_capacity.DrainRefused` when it is unsafe."""
    running = await running_drains(client, exclude_id=inp.workflow_id, task_queue=inp.task_queue)
    if running.get(inp.region, "").startswith(HOLD):
        # The region's own hold (a finished earlier drain of it) is not a second drain.
        del running[inp.region]
    topology = await fleet.topology()
    health = await fleet.health()
    # The routing table lets the check estimate a drained region whose health is missing.
    routing = await fleet.routing()
    others = sorted(running)
    check_or_forecast = check_drain_capacity if check else forecast_drain
    forecast = check_or_forecast(
        topology, health, [inp.region], others, target=inp.target, routing=routing
    )
    return forecast, running


class DrainActivities:
    def __init__(self, fleet: Fleet, client: Client) -> None:
        self._fleet = fleet
        self._client = client

    @activity.defn(name="check_drain_capacity")
    @reported
    async def check_capacity(self, inp: DrainCheckInput) -> DrainForecast:
        """The forecast; a refusal is a non-retryable ``UnsafeRequest`` with the numbers."""
        forecast, _ = await drain_forecast(self._fleet, self._client, inp)
        return forecast

    @activity.defn(name="drain_record")
    async def drain_record(self, inp: DrainRecordInput) -> DrainRecord:
        """What the drain of ``inp.region`` recorded before it changed anything.

        A restore puts back these values, not ones read at restore time (by then the
        drain has changed them). Without a workflow id: the newest finished drain run
        of the region on this task queue, unless a restore of it finished since.
        """
        wid = inp.workflow_id or await self._newest_drain(inp)
        if not wid:
            return DrainRecord(note=f"no finished drain of {inp.region} left to restore")
        handle = self._client.get_workflow_handle(wid, result_type=RunbookReport)
        described = await handle.describe()
        report = None
        if described.status in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED):
            # A drain that did not complete fails with its report attached: what it did not
            # roll back (an undo the fleet refused) is still there to restore.
            with contextlib.suppress(WorkflowFailureError):
                report = await runbook_result(handle)
        if report is None:
            status = described.status.name.lower() if described.status else "unknown"
            raise ApplicationError(
                f"drain {wid} is {status}: nothing recorded to restore from",
                type="UnsafeRequest",
                non_retryable=True,
            )
        return DrainRecord(workflow_id=wid, records=report.restore_records)

    async def _newest_drain(self, inp: DrainRecordInput) -> str:
        scope = f" AND Region = '{inp.region}'"
        if inp.task_queue:
            scope += f" AND TaskQueue = '{inp.task_queue}'"
        newest: dict[str, tuple[Any, str]] = {}
        for kind in ("drain", "restore"):
            # A drain that failed without undoing all it did (its Outcome says so) left
            # changes to restore; a restore counts only once it completed.
            ended = "ExecutionStatus = 'Completed'"
            if kind == "drain":
                ended = f"({ended} OR Outcome = 'failed' OR Outcome = 'rollback_failed')"
            query = f"RunKind = '{kind}' AND {ended}{scope}"
            async for execution in self._client.list_workflows(query):
                closed = execution.close_time
                if closed is not None and (kind not in newest or closed > newest[kind][0]):
                    newest[kind] = (closed, execution.id)
        if "drain" not in newest:
            return ""
        if "restore" in newest and newest["restore"][0] > newest["drain"][0]:
            return ""  # restored since: its values are back already
        return newest["drain"][1]
