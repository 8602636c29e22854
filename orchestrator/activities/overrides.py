"""Asking the rebalancer for region overrides.

Workflows cannot send Updates to other workflows, so drains and load tests go
through these activities, which use the worker's Temporal client. A refusal by
the rebalancer's validator (not enough capacity left, region held by another
owner) comes back as a non-retryable error of the same type.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.activities.heartbeat import heartbeating
from orchestrator.activities.rebalancer_recovery import last_holds
from orchestrator.contracts.rebalancer import (
    REBALANCER_ID,
    ClearOverrideInput,
    OverrideApplied,
    RebalancerStatus,
    RoutingWriter,
    SetOverrideInput,
)

__all__ = ["OverrideActivities"]

#: a running rebalancer answers its status query within this, or counts as not answering
STATUS_TIMEOUT = timedelta(seconds=10)


def _update_id() -> str:
    """The same for every attempt of one activity (and a replay of its workflow), so a
    retry after a crash or a timeout attaches to the Update already sent instead of
    asking the rebalancer a second time."""
    info = activity.info()
    return f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"


def _refusal(exc: WorkflowUpdateFailedError) -> ApplicationError:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return ApplicationError(cause.message, type=cause.type, non_retryable=True)
    return ApplicationError(str(cause or exc), type="UnsafeRequest", non_retryable=True)


class OverrideActivities:
    def __init__(self, client: Client, rebalancer_id: str = REBALANCER_ID) -> None:
        self._client = client
        self._rebalancer_id = rebalancer_id

    @activity.defn(name="request_override")
    async def request(self, inp: SetOverrideInput) -> OverrideApplied:
        handle = self._client.get_workflow_handle(self._rebalancer_id)
        try:
            return await heartbeating(
                handle.execute_update(
                    "set_override", inp, id=_update_id(), result_type=OverrideApplied
                )
            )
        except WorkflowUpdateFailedError as exc:
            raise _refusal(exc) from None

    @activity.defn(name="release_override")
    async def release(self, inp: ClearOverrideInput) -> OverrideApplied:
        handle = self._client.get_workflow_handle(self._rebalancer_id)
        try:
            return await heartbeating(
                handle.execute_update(
                    "clear_override", inp, id=_update_id(), result_type=OverrideApplied
                )
            )
        except WorkflowUpdateFailedError as exc:
            raise _refusal(exc) from None

    @activity.defn(name="rebalancer_status")
    async def status(self) -> RebalancerStatus:
        handle = self._client.get_workflow_handle(self._rebalancer_id)
        return await handle.query("status", result_type=RebalancerStatus)

    @activity.defn(name="routing_writer")
    async def writer(self) -> RoutingWriter:
        """The running rebalancer and its status; or, with none, what became of it and the
        holds its last run kept. A rebalancer that runs but does not answer is retried."""
        handle = self._client.get_workflow_handle(self._rebalancer_id)
        try:
            described = await handle.describe()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return RoutingWriter(running=False, detail="no rebalancer has been started")
        if described.status == WorkflowExecutionStatus.RUNNING:
            status = await handle.query(
                "status", result_type=RebalancerStatus, rpc_timeout=STATUS_TIMEOUT
            )
            return RoutingWriter(running=True, status=status)
        ended = described.status.name.lower() if described.status else "closed"
        _, holds = await last_holds(
            self._client, self._rebalancer_id, task_queue=activity.info().task_queue
        )
        return RoutingWriter(running=False, detail=f"the rebalancer {ended}", holds=holds)
