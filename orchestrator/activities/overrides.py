"""Asking the rebalancer for region overrides.

Workflows cannot send Updates to other workflows, so drains and load tests go
through these activities, which use the worker's Temporal client. A refusal by
the rebalancer's validator (not enough capacity left, region held by another
owner) comes back as a non-retryable error of the same type.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from orchestrator.contracts.rebalancer import (
    REBALANCER_ID,
    ClearOverrideInput,
    OverrideApplied,
    RebalancerStatus,
    SetOverrideInput,
)

__all__ = ["OverrideActivities"]


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
            return await handle.execute_update("set_override", inp, result_type=OverrideApplied)
        except WorkflowUpdateFailedError as exc:
            raise _refusal(exc) from None

    @activity.defn(name="release_override")
    async def release(self, inp: ClearOverrideInput) -> OverrideApplied:
        handle = self._client.get_workflow_handle(self._rebalancer_id)
        try:
            return await handle.execute_update("clear_override", inp, result_type=OverrideApplied)
        except WorkflowUpdateFailedError as exc:
            raise _refusal(exc) from None

    @activity.defn(name="rebalancer_status")
    async def status(self) -> RebalancerStatus:
        handle = self._client.get_workflow_handle(self._rebalancer_id)
        return await handle.query("status", result_type=RebalancerStatus)
