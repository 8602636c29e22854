"""TrafficRebalanceWorkflow: the only writer of the routing table (Taiji's runtime).

Every epoch: read demand, capacity, utilization and RTT; skip, saying why,
when the inputs cannot be trusted; solve; check the invariants; publish with
If-Match and an idempotency key; keep the last good table. Drains and load
tests do not write routing themselves: they ask for an override with a signal
naming a ticket, and read its outcome with a query (:mod:`workflows.rebalancer_intake`);
a request that would leave the rest of the fleet unable to carry the load or that
collides with another owner's hold is refused at once.

The writer must not die (see :mod:`workflows.rebalancer_support`): a fleet it
cannot reach skips the epoch, the holds outlive the run, and a table that breaks
a hold (a fleet that lost its state) is fixed at once by an emergency step.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.rebalance import EpochPlan, PlanEpochInput, PublishInput
    from orchestrator.contracts.rebalancer import (
        HOLDS_MEMO,
        KEPT_EPOCHS,
        STOPPED_MEMO,
        EpochRecord,
        PauseInput,
        RebalancerInput,
        RebalancerStatus,
        ResumeInput,
        StopInput,
    )
    from orchestrator.temporal import RUN_KIND
    from workflows import observe
    from workflows.rebalancer_intake import OverrideIntake
    from workflows.rebalancer_overrides import OverrideChanges, capacity_shares
    from workflows.rebalancer_support import ACTIVITY_RETRY, URGENT_RETRIES, unreadable
    from workflows.rebalancer_tickets import settle_tickets

__all__ = ["ACTIVITY_RETRY", "URGENT_RETRIES", "TrafficRebalanceWorkflow"]


@workflow.defn
class TrafficRebalanceWorkflow(OverrideIntake):
    @workflow.init
    def __init__(self, inp: RebalancerInput) -> None:
        self.inp = inp
        self.state = inp.state
        # Requests carried over by continue-as-new are settled by the first epoch, at once.
        self.wake = bool(inp.state.pending)
        # Changes by the old Updates are numbered; an epoch settles every change made before
        # it began (requests by signal: every ticket pending when it began).
        self.overrides = OverrideChanges()
        self.restore_fractions: dict[str, dict[str, float]] | None = None
        #: untrusted epochs in a row that left an override change waiting
        self.urgent_skips = 0
        #: seconds to the retry of such an epoch (None: the normal epoch interval)
        self.retry_s: float | None = None
        #: the holds as last written to the memo (carried over by continue-as-new)
        self._memo_holds = workflow.memo_value(HOLDS_MEMO, None)
        #: ``request_stop``: the run ends at the next epoch boundary, never inside an epoch
        self.stop: StopInput | None = None

    @workflow.run
    async def run(self, inp: RebalancerInput) -> None:
        workflow.upsert_search_attributes([RUN_KIND.value_set("rebalance")])
        observe.rebalancer_paused(self.state.paused_by is not None)
        first = self.state.epoch == 0
        for _ in range(inp.epochs_per_run):
            if workflow.info().is_continue_as_new_suggested() or self.stop is not None:
                break
            if not first:
                await self._sleep_until_next_epoch()
            first = False
            if self.state.paused_by is None and self.stop is None:
                await self._epoch()
        while self.retry_s is not None and self.state.paused_by is None and self.stop is None:
            # An override is waiting on a retry: settle it before continuing as new.
            await self._sleep_until_next_epoch()
            await self._epoch()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self.stop is not None:
            self._stopped(self.stop)
            return
        workflow.continue_as_new(inp.model_copy(update={"state": self.state}))

    def _stopped(self, stop: StopInput) -> None:
        """End the run: refuse the requests no epoch will settle now (their owners learn at
        once, and a drain's hold not yet in force is withdrawn); the holds in force stay in
        the memo for the next run."""
        why = f"the rebalancer was stopped by {stop.by}" + (
            f": {stop.reason}" if stop.reason else ""
        )
        self._settle((self.overrides.changes, len(self.state.pending)), failure=why)
        workflow.upsert_memo(
            {
                STOPPED_MEMO: {
                    "by": stop.by,
                    "reason": stop.reason,
                    "epoch": self.state.epoch,
                    "version": self.state.last_good_version,
                }
            }
        )
        workflow.logger.info("stopped after epoch %s: %s", self.state.epoch, why)

    async def _sleep_until_next_epoch(self) -> None:
        wait_s = self.next_epoch_s()
        self.retry_s = None
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: self.wake, timeout=timedelta(seconds=wait_s))
        self.wake = False

    async def _epoch(self) -> None:
        changes, tickets = self.overrides.changes, len(self.state.pending)
        urgent = self.overrides.pending or tickets > 0
        waiting = await self._take_over_holds()
        planned = (
            waiting
            if waiting is not None
            else await self._plan(
                PlanEpochInput(
                    overrides=list(self.state.overrides.values()),
                    constraints=self.inp.constraints,
                    service=self.inp.service,
                    window_s=self.inp.window_s,
                    urgent=urgent,
                    restore_fractions=self.restore_fractions if urgent else None,
                    seen_version=self.state.seen_version,
                )
            )
        )
        self.state.epoch += 1
        epoch = self.state.epoch
        # A fleet that cannot be read is one a later epoch may reach: skip, never fail.
        plan = unreadable(planned) if isinstance(planned, str) else planned
        self._note_fleet(plan, epoch)
        if plan.view is not None:
            self.state.view = plan.view
        result = plan.result
        if result is None or plan.skip_reason is not None:
            self._skip(plan, epoch, urgent, (changes, tickets))
            return
        self.urgent_skips = 0
        record = EpochRecord(
            epoch=epoch,
            at=workflow.now(),
            outcome="unchanged",
            reason=plan.note,
            max_utilization_before=result.max_utilization_before,
            max_utilization_after=result.max_utilization,
            utilization_spread_before=_spread(
                [r.utilization_before for r in result.regions if r.status == "active"]
            ),
            traffic_moved_share=result.traffic_moved_share,
            churn=result.churn,
            urgent=urgent,
            emergency=plan.emergency,
        )
        if result.traffic_moved_share > 0 or urgent or plan.emergency:
            published = await self._publish(
                PublishInput(
                    fractions=result.fractions,
                    if_match=plan.routing_version,
                    idempotency_key=self._key(epoch),
                    reason=f"rebalancer epoch {epoch}"
                    + (" (override)" if urgent else "")
                    + (" (emergency: the table broke a hold)" if plan.emergency else ""),
                )
            )
            if isinstance(published, str):
                self._skip(unreadable(published), epoch, urgent, (changes, tickets))
                return
            if published.conflict:
                # Someone else wrote the table since we read it: re-read at once.
                self._record(
                    record.model_copy(
                        update={"outcome": "conflict", "reason": "routing changed since read"}
                    )
                )
                self.wake = True
                return
            record.outcome, record.version = "published", published.version
            self.state.last_good_version = published.version
        else:
            record.version = plan.routing_version
            self.state.last_good_version = plan.routing_version
        if urgent:
            # Only now: a publish that failed is retried with the table still to put back.
            self.restore_fractions = None
        self.state.fractions = result.fractions
        self.state.utilization = {r.name: r.utilization_after for r in result.regions}
        self.state.shares = {r.name: r.share_after for r in result.regions}
        record.shares, record.utilization = self.state.shares, self.state.utilization
        self._record(record)
        self._settle((changes, tickets))

    def _settle(self, taken: tuple[int, int], failure: str | None = None) -> None:
        """Settle what the epoch took: the old Updates' changes and the pending tickets."""
        changes, tickets = taken
        self.overrides.settle(changes, failure=failure)
        if settle_tickets(self.state, tickets, failure):
            self._remember()  # a set withdrawn: the memo keeps the holds in force

    def _skip(self, plan: EpochPlan, epoch: int, urgent: bool, taken: tuple[int, int]) -> None:
        """Record a skipped epoch; an override waiting on it is retried or refused."""
        retry = self._retry_untrusted(plan, urgent)
        reason = plan.skip_reason or ""
        if retry:
            reason += f" (override waits: retry {self.urgent_skips} of {URGENT_RETRIES})"
        self._record(
            EpochRecord(
                epoch=epoch,
                at=workflow.now(),
                outcome="skipped",
                reason=reason,
                urgent=urgent,
                emergency=plan.emergency,
            )
        )
        if not retry:
            if urgent:
                self.restore_fractions = None
            self._settle(taken, failure=plan.skip_reason if urgent else None)

    def _record(self, record: EpochRecord) -> None:
        self.state.epochs = [*self.state.epochs, record][-KEPT_EPOCHS:]
        workflow.logger.info("epoch %s %s %s", record.epoch, record.outcome, record.reason)
        observe.rebalancer_epoch(
            record.epoch, record.outcome, record.version, record.utilization_spread_before
        )

    # --- operator controls -------------------------------------------------

    @workflow.update
    def pause(self, inp: PauseInput) -> RebalancerStatus:
        self.state.paused_by, self.state.pause_reason = inp.by, inp.reason
        observe.rebalancer_paused(True)
        return self.status()

    @workflow.update
    def resume(self, inp: ResumeInput) -> RebalancerStatus:
        self.state.paused_by, self.state.pause_reason = None, ""
        observe.rebalancer_paused(False)
        self.wake = True
        return self.status()

    @workflow.signal
    def request_stop(self, inp: StopInput) -> None:
        """A signal, not an Update, for the reason in :mod:`workflows.rebalancer_intake`.
        Unlike a terminate, the epoch in progress ends first: a publish in flight lands
        before the run is closed, never after (a write typed after ``rebalance stop``
        returns cannot meet it)."""
        if self.stop is None:
            self.stop = inp
            self.wake = True

    @workflow.query
    def status(self) -> RebalancerStatus:
        return RebalancerStatus(
            epoch=self.state.epoch,
            paused_by=self.state.paused_by,
            pause_reason=self.state.pause_reason,
            last_good_version=self.state.last_good_version,
            overrides=list(self.state.overrides.values()),
            utilization=self.state.utilization,
            shares=self.state.shares,
            fractions=self.state.fractions,
            epochs=self.state.epochs,
            capacity_shares=capacity_shares(self.state),
            trusted_view=self.state.view is not None,
            max_utilization_increase=self.inp.constraints.max_utilization_increase,
            epoch_s=self.inp.epoch_s,
            incidents=self.state.incidents,
            recovery_note=self.state.recovery_note,
        )


def _spread(values: list[float]) -> float | None:
    return max(values) - min(values) if values else None
