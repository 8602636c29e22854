"""The port that starts runbook runs, and its Temporal implementation.

The trigger server decides *what* to start; a :class:`RunStarter` does it. The
Temporal one starts the workflow type ``RUNBOOK_WORKFLOW`` by name (the trigger
server never imports workflow code) with ``id_conflict_policy=FAIL``, so an open
run with the same id means "already running" (deduplicated).

What a *closed* run's id means depends on who asked:

- An alert's run has the episode in its id (``<runbook>-alert-<identity>-<episode>``,
  see :mod:`orchestrator.triggers.rules`), and is started with
  ``id_reuse_policy=REJECT_DUPLICATE``: once that episode's run has closed, however
  it ended, Alertmanager re-sending the still-firing group (``repeat_interval``)
  gets "already started" and starts nothing. A group that resolved and fires again
  is a new episode, hence a new id, hence a new run. ``ALLOW_DUPLICATE_FAILED_ONLY``
  was not chosen: a run that failed or rolled back would be started again on every
  repeat of the same alert, a retry loop nobody asked for; an operator retries by
  hand. The reuse policy holds while Temporal retains the closed run (the
  namespace's retention period); the trigger server also remembers the ids it saw.
- A manual start keeps the default ``ALLOW_DUPLICATE``: its id comes from the
  caller's idempotency key, which dedups while the run is open and may run again
  once it has closed.

Runs carry their parameters in the memo, so a restarted server can find the last
start of a runbook *with these parameters* (the cooldown's key) in visibility.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.contracts.runbook import RUNBOOK_WORKFLOW, AlertResolvedInput, RunbookRunInput
from orchestrator.exceptions import OrchestratorError
from orchestrator.temporal import REGION, RUN_KIND, RUNBOOK
from orchestrator.triggers.cooldown import same_parameters

__all__ = [
    "ALERT_RESOLVED_SIGNAL",
    "PARAMETERS_MEMO",
    "RunInfo",
    "RunStarter",
    "StartFailed",
    "StartRequest",
    "StartResult",
    "TemporalRunStarter",
]

ALERT_RESOLVED_SIGNAL = "alert_resolved"
#: the memo field holding a run's parameters
PARAMETERS_MEMO = "parameters"


class StartFailed(OrchestratorError):
    """Temporal did not accept the call; the sender should retry (Alertmanager does on 5xx)."""

    retryable = True


class StartRequest(BaseModel):
    workflow_id: str
    input: RunbookRunInput
    #: the Region search attribute, when the run concerns one region
    region: str | None = None
    #: never start this id again once a run with it has closed (an alert episode's run)
    once: bool = False


class StartResult(BaseModel):
    workflow_id: str
    run_id: str
    #: False when a run already had this id (nothing new started)
    started: bool


class RunInfo(BaseModel):
    run_id: str
    open: bool


class RunStarter(Protocol):
    async def start(self, request: StartRequest) -> StartResult: ...

    async def signal_resolved(self, workflow_id: str, signal: AlertResolvedInput) -> str | None:
        """Tell the open run ``workflow_id`` that an alert resolved; its run id, or None
        when no run with that id is open."""
        ...

    async def find_run(self, workflow_id: str) -> RunInfo | None:
        """The latest run with this workflow id, open or closed, if Temporal has one."""
        ...

    async def last_start(
        self, runbook: str, parameters: Mapping[str, Any], region: str | None, since: datetime
    ) -> datetime | None:
        """The newest start time of a run of ``runbook`` with ``parameters`` (whose region,
        if any, is ``region``) at or after ``since``, if any
        (:func:`~orchestrator.triggers.cooldown.same_parameters`)."""
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
                id_reuse_policy=(
                    WorkflowIDReusePolicy.REJECT_DUPLICATE
                    if request.once
                    else WorkflowIDReusePolicy.ALLOW_DUPLICATE
                ),
                search_attributes=TypedSearchAttributes(pairs),
                memo={PARAMETERS_MEMO: run.parameters},
            )
        except WorkflowAlreadyStartedError as exc:
            found = None if exc.run_id else await self.find_run(request.workflow_id)
            run_id = exc.run_id or (found.run_id if found else "")
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

    async def find_run(self, workflow_id: str) -> RunInfo | None:
        try:
            description = await self._client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise _failed(f"describe {workflow_id}", exc) from None
        return RunInfo(
            run_id=description.run_id,
            open=description.status == WorkflowExecutionStatus.RUNNING,
        )

    async def last_start(
        self, runbook: str, parameters: Mapping[str, Any], region: str | None, since: datetime
    ) -> datetime | None:
        # Only runs inside the window matter, so the query stays small however long
        # the runbook's history is (SQL visibility cannot ORDER BY). Only runs on this
        # starter's task queue: a namespace shared by two deployments (staging and prod
        # workers on their own queues) must not let one's run hold back the other's.
        query = (
            f'Runbook = "{runbook}" AND TaskQueue = "{self._task_queue}"'
            f' AND StartTime >= "{since.isoformat()}"'
        )
        newest: datetime | None = None
        try:
            async for execution in self._client.list_workflows(query, limit=1000):
                if newest is not None and execution.start_time <= newest:
                    continue
                memo = await execution.memo()
                run_parameters = memo.get(PARAMETERS_MEMO)
                if not same_parameters(
                    run_parameters if isinstance(run_parameters, dict) else None,
                    execution.typed_search_attributes.get(REGION),
                    parameters,
                    region,
                ):
                    continue
                newest = execution.start_time
        except RPCError as exc:
            raise _failed(f"list runs of {runbook}", exc) from None
        return newest
