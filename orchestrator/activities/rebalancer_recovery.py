"""Holds outlive the rebalancer run that enforced them.

A drain's hold (``max_share 0`` on the drained region) belongs to the drain, not to the
rebalancer: it must stay in force when the rebalancer fails, is terminated, or is stopped
and started again. Each rebalancer run keeps the holds it enforces in its memo (stored by
Temporal with the run, readable after it closed, without a worker replaying it); a new run
(not a continue-as-new, which carries its state) takes over the holds of the newest earlier
run of the same workflow id on the same task queue.

A hold is kept unless its owner is known to be gone: a load test's hold
(``loadtest:<workflow id>``) is dropped when that workflow is no longer running (its
routing is the rebalancer's again). A drain's hold (``runbook:<region>``) outlives the
drain run by design, so it is always kept: only a restore releases it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.activities.heartbeat import heartbeating
from orchestrator.contracts.rebalancer import HOLDS_MEMO, holds_from_memo
from orchestrator.logging import get_logger
from orchestrator.policy.rebalance.inputs import Override

__all__ = [
    "LOADTEST_OWNER",
    "RecoverHoldsInput",
    "RecoveredHolds",
    "RebalancerRecoveryActivities",
    "last_holds",
]

log = get_logger(__name__)

LOADTEST_OWNER = "loadtest:"


class RecoverHoldsInput(BaseModel):
    workflow_id: str
    #: the run asking (left out of the search)
    run_id: str
    task_queue: str = ""


class RecoveredHolds(BaseModel):
    #: the earlier run read ("" when there was none)
    from_run: str = ""
    kept: list[Override] = Field(default_factory=list)
    #: holds left behind, each with why
    dropped: list[str] = Field(default_factory=list)

    @property
    def note(self) -> str:
        if not self.from_run:
            return "no earlier run found: no holds to take over" + "".join(
                f"; {why}" for why in self.dropped
            )
        kept = ", ".join(f"{o.region} ({o.owner})" for o in self.kept) or "none"
        text = f"took over the holds of run {self.from_run}: {kept}"
        return text + (f"; dropped {'; '.join(self.dropped)}" if self.dropped else "")


async def last_holds(
    client: Client, workflow_id: str, *, task_queue: str = "", exclude_run: str = ""
) -> tuple[str, list[Override]]:
    """The run id and holds of the newest run of ``workflow_id`` (other than
    ``exclude_run``) that kept its holds in its memo; ``("", [])`` when none did."""
    query = f"WorkflowId = '{workflow_id}'"
    if task_queue:
        query += f" AND TaskQueue = '{task_queue}'"
    newest: tuple[datetime, str, object] | None = None
    async for execution in client.list_workflows(query):
        if execution.run_id == exclude_run:
            continue
        # A run that never wrote the memo (it ended before its first epoch, or ran code
        # from before the memo) knows nothing: the newest run that did is the truth.
        memo = await execution.memo()
        if HOLDS_MEMO in memo and (newest is None or execution.start_time > newest[0]):
            newest = (execution.start_time, execution.run_id, memo[HOLDS_MEMO])
    if newest is None:
        return "", []
    return newest[1], holds_from_memo(newest[2])


async def _running(client: Client, workflow_id: str) -> bool:
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return described.status == WorkflowExecutionStatus.RUNNING


class RebalancerRecoveryActivities:
    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name="recover_rebalancer_holds")
    async def recover(self, inp: RecoverHoldsInput) -> RecoveredHolds:
        return await heartbeating(self._recover(inp))

    async def _recover(self, inp: RecoverHoldsInput) -> RecoveredHolds:
        try:
            run, holds = await last_holds(
                self._client, inp.workflow_id, task_queue=inp.task_queue, exclude_run=inp.run_id
            )
        except RPCError as exc:
            if exc.status != RPCStatusCode.UNIMPLEMENTED:
                raise
            # Only a server without visibility (Temporal's time-skipping test server) answers
            # so: it cannot list earlier runs, and retrying would not change that.
            return RecoveredHolds(dropped=["this Temporal server cannot list earlier runs"])
        found = RecoveredHolds(from_run=run)
        for hold in holds:
            owner_run = hold.owner.removeprefix(LOADTEST_OWNER)
            if hold.owner.startswith(LOADTEST_OWNER) and not await _running(
                self._client, owner_run
            ):
                found.dropped.append(f"{hold.region} ({hold.owner}: that load test has ended)")
                continue
            found.kept.append(hold)
        log.info("rebalancer holds recovered", note=found.note)
        return found
