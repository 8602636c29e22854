"""TrafficRebalanceWorkflow's calls to the world, made so that the writer never dies.

The rebalancer is the only writer of the routing table: when it fails, drains and load
tests lose their holds and nobody repairs the table. So here every activity failure
(the fleet down for longer than the retry budget, a worker too starved to heartbeat)
becomes a reason to skip the epoch, never a workflow failure; a new run takes over
the holds of the run before it (kept in the memo, see
:mod:`orchestrator.activities.rebalancer_recovery`); and what went wrong is counted
(status, SDK metrics, log lines) so that it is seen.

Every change here to the commands the workflow issues is behind a patch, so histories
recorded before replay as they ran.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.rebalance import (
        EpochPlan,
        PlanEpochInput,
        PublishInput,
        PublishResult,
        RebalanceActivities,
    )
    from orchestrator.activities.rebalancer_recovery import (
        RebalancerRecoveryActivities,
        RecoveredHolds,
        RecoverHoldsInput,
    )
    from orchestrator.contracts.rebalancer import (
        HOLDS_MEMO,
        RebalancerInput,
        RebalancerState,
        hold_memo,
    )
    from orchestrator.exceptions import NON_RETRYABLE_ERROR_TYPES

__all__ = [
    "ACTIVITY_RETRY",
    "KEYS_PATCH",
    "OUTAGE_PATCH",
    "RECOVER_PATCH",
    "SOON_PATCH",
    "UNTRUSTED_RETRY_S",
    "URGENT_RETRIES",
    "WriterSupport",
    "failure_reason",
    "unreadable",
]

ACTIVITY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=15),
    maximum_attempts=10,
    non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
)
#: idempotency keys name the run: epoch numbers restart in every new run
KEYS_PATCH = "rebalancer-run-scoped-keys"
#: an activity that fails for good skips the epoch instead of failing the workflow
OUTAGE_PATCH = "rebalancer-survives-fleet-outage"
#: holds are kept in the memo, and a new run takes over those of the run before it
RECOVER_PATCH = "rebalancer-recover-holds"
#: an override waiting on an epoch whose inputs were untrusted (a window with no samples
#: from a region, a fleet unreachable) is tried again this many times, a window apart,
#: before it is refused
URGENT_RETRIES = 3
URGENT_RETRY_PATCH = "retry-untrusted-urgent-epoch"
#: an epoch with no trusted view of the fleet yet (the first, before every region served
#: traffic) is tried again a window later, not an epoch later (300 s by default), and an
#: override waiting on an untrusted epoch too when no window is configured: overrides
#: (a drain's first step) need that view
SOON_PATCH = "rebalancer-untrusted-retried-soon"
#: the retry when the rebalancer reads the fleet's default window (it does not know its length)
UNTRUSTED_RETRY_S = 10.0


def failure_reason(exc: ActivityError) -> str:
    """The innermost message of an activity failure ("Activity task failed" says nothing)."""
    cause: BaseException = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return str(cause) or type(cause).__name__


def unreadable(reason: str) -> EpochPlan:
    """The skip of an epoch that could not read or write the fleet (or take over holds)."""
    return EpochPlan(routing_version=-1, skip_reason=reason, untrusted=True)


ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")


class WriterSupport:
    """Mixed into TrafficRebalanceWorkflow: plan, publish, take over holds, remember them."""

    inp: RebalancerInput
    state: RebalancerState
    _memo_holds: object
    urgent_skips: int
    retry_s: float | None

    def _count(self, metric: str, description: str) -> None:
        workflow.metric_meter().create_counter(metric, description).add(1)

    async def _plan(self, inp: PlanEpochInput) -> EpochPlan | str:
        """The epoch's plan, or why the fleet could not be read at all."""
        return await self._or_unreachable(
            "reading the fleet", RebalanceActivities.plan_epoch, inp, timedelta(seconds=60)
        )

    async def _publish(self, inp: PublishInput) -> PublishResult | str:
        """The publish's answer, or why it failed for good (the table may or may not be in:
        the next epoch reads the fleet again either way)."""
        return await self._or_unreachable(
            "publishing", RebalanceActivities.publish, inp, timedelta(seconds=30)
        )

    async def _or_unreachable(
        self,
        doing: str,
        method: Callable[[Any, ArgT], Awaitable[ResultT]],
        arg: ArgT,
        limit: timedelta,
    ) -> ResultT | str:
        """The activity's answer, or (past its retries) why the fleet was unreachable: the
        routing writer skips the epoch instead of failing."""
        try:
            return await workflow.execute_activity_method(
                method,
                arg,
                start_to_close_timeout=limit,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=ACTIVITY_RETRY,
            )
        except ActivityError as exc:
            if not workflow.patched(OUTAGE_PATCH):
                raise
            return self._unreachable(doing, exc)

    def _retry_untrusted(self, plan: EpochPlan, urgent: bool) -> bool:
        """Whether a skipped urgent epoch is tried again instead of refusing its overrides.

        A drain's step or a load test's restore should not fail on one window in which a
        region reported nothing; an infeasible solve, or a lasting gap, still refuses.
        """
        if not (urgent and plan.untrusted and self.urgent_skips < URGENT_RETRIES):
            self.urgent_skips = 0
            return False
        if not workflow.patched(URGENT_RETRY_PATCH):
            return False
        self.urgent_skips += 1
        if workflow.patched(SOON_PATCH):
            self.retry_s = self.soon_s()
        else:
            self.retry_s = min(self.inp.epoch_s, self.inp.window_s or self.inp.epoch_s)
        return True

    def soon_s(self) -> float:
        """Seconds to an epoch that retries one whose inputs could not be trusted."""
        return min(self.inp.epoch_s, self.inp.window_s or UNTRUSTED_RETRY_S)

    def next_epoch_s(self) -> float:
        """Seconds to the next epoch: sooner while the rebalancer has no trusted view yet."""
        if self.retry_s is not None:
            return self.retry_s
        if self.state.view is None and workflow.patched(SOON_PATCH):
            return self.soon_s()
        return self.inp.epoch_s

    def _unreachable(self, doing: str, exc: ActivityError) -> str:
        reason = f"fleet unreachable while {doing}: {failure_reason(exc)}"
        incidents = self.state.incidents
        incidents.unreachable_epochs += 1
        incidents.last = f"epoch {self.state.epoch + 1}: {reason}"
        workflow.logger.warning("rebalancer epoch skipped: %s", reason)
        self._count("rebalancer_unreachable_epochs", "epochs skipped: the fleet was unreachable")
        return reason

    def _key(self, epoch: int) -> str:
        info = workflow.info()
        if workflow.patched(KEYS_PATCH):
            return f"{info.workflow_id}/{info.run_id}/epoch-{epoch}"
        return f"{info.workflow_id}/epoch-{epoch}"

    def _note_fleet(self, plan: EpochPlan, epoch: int) -> None:
        """Count and log a fleet that lost its state, and an emergency step."""
        incidents = self.state.incidents
        if plan.regression:
            incidents.routing_regressions += 1
            incidents.last = f"epoch {epoch}: {plan.regression}"
            workflow.logger.warning("epoch %s: %s", epoch, plan.regression)
            self._count("rebalancer_routing_regressions", "the fleet's routing went backwards")
        if plan.emergency and plan.result is not None:
            incidents.emergency_steps += 1
            incidents.last = f"epoch {epoch}: emergency step, the table broke a hold: " + (
                plan.emergency
            )
            workflow.logger.warning("epoch %s: emergency step: %s", epoch, plan.emergency)
            self._count("rebalancer_emergency_steps", "tables fixed without the ramp")
        if plan.routing_version >= 0:
            self.state.seen_version = plan.routing_version

    # --- holds that outlive a run --------------------------------------------

    async def _take_over_holds(self) -> str | None:
        """Take over the holds of the run before this one, once per chain of runs.

        None when done (or not needed); else why not yet, and the epoch is skipped: a
        table solved without a drain's hold would route traffic into the drained region.
        """
        if self.state.recovered:
            return None
        info = workflow.info()
        if info.continued_run_id is not None or not workflow.patched(RECOVER_PATCH):
            self.state.recovered = True
            return None
        try:
            found: RecoveredHolds = await workflow.execute_activity_method(
                RebalancerRecoveryActivities.recover,
                RecoverHoldsInput(
                    workflow_id=info.workflow_id, run_id=info.run_id, task_queue=info.task_queue
                ),
                start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=ACTIVITY_RETRY,
            )
        except ActivityError as exc:
            return f"holds of the earlier run not taken over yet: {failure_reason(exc)}"
        for hold in found.kept:
            # A request made to this run since it started is newer than the recovered hold.
            self.state.overrides.setdefault(hold.region, hold)
        self.state.recovered, self.state.recovery_note = True, found.note
        workflow.logger.info("rebalancer: %s", found.note)
        self._remember()
        return None

    def _remember(self) -> None:
        """Keep the holds in the memo whenever they change (read by the next run)."""
        holds = hold_memo(self.state.overrides)
        if holds == self._memo_holds or not workflow.patched(RECOVER_PATCH):
            return
        workflow.upsert_memo({HOLDS_MEMO: holds})
        self._memo_holds = holds
