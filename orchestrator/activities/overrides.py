"""Asking the rebalancer for region overrides.

Drains and load tests go through these activities, which use the worker's
Temporal client: a signal naming a ticket, then the ticket polled until an epoch
settles it (:mod:`orchestrator.clients.overrides`), heartbeating meanwhile. A
refusal (not enough capacity left, region held by another owner) or a request no
epoch could honour comes back as a non-retryable error of the same type.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.activities.heartbeat import heartbeating
from orchestrator.activities.rebalancer_recovery import last_holds
from orchestrator.clients.overrides import release_override, request_override
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


def _ticket() -> str:
    """The same for every attempt of one activity (and a replay of its workflow), so a
    retry after a crash or a timeout reads the request already sent instead of asking
    the rebalancer a second time."""
    info = activity.info()
    return f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"


class OverrideActivities:
    def __init__(self, client: Client, rebalancer_id: str = REBALANCER_ID) -> None:
        self._client = client
        self._rebalancer_id = rebalancer_id

    @activity.defn(name="request_override")
    async def request(self, inp: SetOverrideInput) -> OverrideApplied:
        handle = self._client.get_workflow_handle(self._rebalancer_id)
        return await heartbeating(request_override(handle, inp, ticket=_ticket()))

    @activity.defn(name="release_override")
    async def release(self, inp: ClearOverrideInput) -> OverrideApplied:
        handle = self._client.get_workflow_handle(self._rebalancer_id)
        return await heartbeating(release_override(handle, inp, ticket=_ticket()))

    @activity.defn(name="rebalancer_status")
    async def status(self) -> RebalancerStatus:
        handle = self._client.get_workflow_handle(self._rebalancer_id)
        return await heartbeating(handle.query("status", result_type=RebalancerStatus))

    @activity.defn(name="routing_writer")
    async def writer(self) -> RoutingWriter:
        """The running rebalancer and its status; or, with none, what became of it and the
        holds its last run kept. A rebalancer that runs but does not answer is retried."""
        return await heartbeating(self._writer())

    async def _writer(self) -> RoutingWriter:
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
