"""The port that starts runbook runs, and its Temporal implementation.

The trigger server decides *what* to start; a :class:`RunStarter` does it. The
Temporal one starts the workflow type ``RUNBOOK_WORKFLOW`` by name (the trigger
server never imports workflow code) with ``id_conflict_policy=FAIL``: an open run
with the same id means "already running" (deduplicated), while a closed one may
start again (the default reuse policy allows it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.contracts.runbook import RUNBOOK_WORKFLOW, AlertResolvedInput, RunbookRunInput
from orchestrator.exceptions import OrchestratorError
from orchestrator.temporal import REGION, RUN_KIND, RUNBOOK

__all__ = [
    "ALERT_RESOLVED_SIGNAL",
    "RunStarter",
    "StartFailed",
    "StartRequest",
    "StartResult",
    "TemporalRunStarter",
]

ALERT_RESOLVED_SIGNAL = "alert_resolved"


class StartFailed(OrchestratorError):
    """Temporal did not accept the call; the sender should retry (Alertmanager does on 5xx)."""

    retryable = True


class StartRequest(BaseModel):
    workflow_id: str
    input: RunbookRunInput
    #: the Region search attribute, when the run concerns one region
    region: str | None = None


class StartResult(BaseModel):
    workflow_id: str
    run_id: str
    #: False when an open run already had this id (nothing new started)
    started: bool


class RunStarter(Protocol):
    async def start(self, request: StartRequest) -> StartResult: ...

    async def signal_resolved(self, workflow_id: str, signal: AlertResolvedInput) -> str | None:
        """Tell the open run ``workflow_id`` that an alert resolved; its run id, or None
        when no run with that id is open."""
        ...

    async def open_run(self, workflow_id: str) -> str | None:
        """The run id of the open run with this workflow id, if any."""
        ...

    async def last_start(self, runbook: str, since: datetime) -> datetime | None:
        """The newest start time of a run of ``runbook`` at or after ``since``, if any."""
        ...


def _failed(action: str, exc: RPCError) -> StartFailed:
    return StartFailed(f"temporal refused to {action}: {exc.status.name}: {exc.message}")


class TemporalRunStarter:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def start(self, request: StartRequest) -> StartResult:
        run = request.input
        pairs: list[SearchAttributePair[str]] = [
            SearchAttributePair(RUNBOOK, run.runbook.name),
            SearchAttributePair(RUN_KIND, run.runbook.kind.value),
        ]
        if request.region:
            pairs.append(SearchAttributePair(REGION, request.region))
        try:
            handle = await self._client.start_workflow(
                RUNBOOK_WORKFLOW,
                run,
                id=request.workflow_id,
                task_queue=self._task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                search_attributes=TypedSearchAttributes(pairs),
            )
        except WorkflowAlreadyStartedError as exc:
            run_id = exc.run_id or await self.open_run(request.workflow_id) or ""
            return StartResult(workflow_id=request.workflow_id, run_id=run_id, started=False)
        except RPCError as exc:
            raise _failed(f"start {request.workflow_id}", exc) from None
        return StartResult(
            workflow_id=request.workflow_id, run_id=handle.result_run_id or "", started=True
        )

    async def signal_resolved(self, workflow_id: str, signal: AlertResolvedInput) -> str | None:
        handle = self._client.get_workflow_handle(workflow_id)
        try:
            description = await handle.describe()
            if description.status != WorkflowExecutionStatus.RUNNING:
                return None
            # Pin the run we saw open: a signal must not reach a later run of the same id.
            await self._client.get_workflow_handle(workflow_id, run_id=description.run_id).signal(
                ALERT_RESOLVED_SIGNAL, signal
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None  # never started, or closed between describe and signal
            raise _failed(f"signal {workflow_id}", exc) from None
        return description.run_id

    async def open_run(self, workflow_id: str) -> str | None:
        try:
            description = await self._client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise _failed(f"describe {workflow_id}", exc) from None
        if description.status != WorkflowExecutionStatus.RUNNING:
            return None
        return description.run_id

    async def last_start(self, runbook: str, since: datetime) -> datetime | None:
        # Only runs inside the window matter, so the query stays small however long
        # the runbook's history is (SQL visibility cannot ORDER BY).
        query = f'Runbook = "{runbook}" AND StartTime >= "{since.isoformat()}"'
        newest: datetime | None = None
        try:
            async for execution in self._client.list_workflows(query, limit=1000):
                if newest is None or execution.start_time > newest:
                    newest = execution.start_time
        except RPCError as exc:
            raise _failed(f"list runs of {runbook}", exc) from None
        return newest
