"""The capacity check a drain runs before it changes anything, and the record a restore reads.

The check itself (running drains, the forecast) is :mod:`orchestrator.clients.drains`,
shared with the CLI's ``drain --dry-run``; the inputs are in
:mod:`orchestrator.contracts.drain` (and importable from here, as workflows import them).
"""

from __future__ import annotations

import contextlib
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from orchestrator.activities.errors import reported
from orchestrator.clients.drains import drain_forecast
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.drain import DrainCheckInput, DrainRecordInput
from orchestrator.contracts.runbook import DrainRecord, RunbookReport
from orchestrator.fleet.protocol import Fleet
from orchestrator.policy.drain.capacity import DrainForecast

__all__ = [
    "DrainActivities",
    "DrainCheckInput",
    "DrainRecordInput",
]


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
