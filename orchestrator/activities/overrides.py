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

from orchestrator.activities.heartbeat import heartbeating
from orchestrator.contracts.rebalancer import (
    REBALANCER_ID,
    ClearOverrideInput,
    OverrideApplied,
    RebalancerStatus,
    SetOverrideInput,
)

__all__ = ["OverrideActivities"]


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
