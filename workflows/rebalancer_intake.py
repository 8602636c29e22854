"""How TrafficRebalanceWorkflow takes override requests: signals in, a query out.

Drains and load tests send ``request_override`` / ``release_override`` signals
naming a ticket and poll ``override_ticket`` until an epoch settles it
(:mod:`workflows.rebalancer_tickets`; the client side is
:mod:`orchestrator.clients.overrides`). Why signals and not Updates that return
at once: an Update is "in flight" from the moment the server admits it until a
workflow task completes it, so a burst of requests during one slow workflow task
still hits the limit of 10; and the saved failure (an Update accepted in the
same workflow task as the loop's next activity, recorded in an order the replay
does not reproduce, temporalio/sdk-python#1591) is about where an Update's
acceptance lands among the task's commands, whatever its handler does. A signal
is an event in history: the replay delivers it exactly where the run saw it.

The ``set_override`` / ``clear_override`` Updates stay registered so that runs
recorded before this change replay, but their validators refuse every new call.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.rebalancer import (
        ClearOverrideInput,
        OverrideApplied,
        OverrideTicket,
        RebalancerInput,
        RebalancerState,
        SetOverrideInput,
    )
    from workflows.rebalancer_overrides import OverrideChanges, make_override
    from workflows.rebalancer_support import WriterSupport
    from workflows.rebalancer_tickets import find_ticket, known, take_clear, take_set

__all__ = ["OverrideIntake", "UPDATE_REPLACED"]

#: the refusal of the old Updates, naming what replaced them
UPDATE_REPLACED = (
    "the {name} Update is replaced by the {signal} signal and the override_ticket query "
    "(orchestrator.clients.overrides)"
)


class OverrideIntake(WriterSupport):
    """TrafficRebalanceWorkflow's base: the override signals, query and old Updates."""

    inp: RebalancerInput
    state: RebalancerState
    wake: bool
    overrides: OverrideChanges
    restore_fractions: dict[str, dict[str, float]] | None

    # --- signals and the query (every run since override tickets) -------------

    @workflow.signal
    def request_override(self, inp: SetOverrideInput) -> None:
        ticket = inp.ticket or ""
        if not ticket or known(self.state, ticket):
            return  # a retry of a request already taken (or one no owner can read)
        target = self.inp.constraints.target_utilization
        if take_set(self.state, inp, ticket, target, workflow.now()):
            self._remember()
            self.wake = True

    @workflow.signal
    def release_override(self, inp: ClearOverrideInput) -> None:
        ticket = inp.ticket or ""
        if not ticket or known(self.state, ticket):
            return
        if take_clear(self.state, inp, ticket):
            if inp.restore_fractions is not None:
                # Only with a hold released: a stale table must not wait for some later epoch.
                self.restore_fractions = inp.restore_fractions
            self._remember()
            self.wake = True

    @workflow.query
    def override_ticket(self, ticket: str) -> OverrideTicket:
        """The request's outcome: pending, applied, failed (with the error), or unknown."""
        return find_ticket(self.state, ticket)

    # --- the Updates of runs recorded before tickets (replay only) ------------

    @workflow.update
    async def set_override(self, inp: SetOverrideInput) -> OverrideApplied:
        override = make_override(inp, workflow.now())
        previous = self.state.overrides.get(inp.region)
        self.state.overrides[inp.region] = override
        self._remember()
        change, self.wake = self.overrides.new(), True
        if not inp.wait_applied:
            return OverrideApplied(epoch=self.state.epoch, version=None, region_share=None)
        try:
            return await self.overrides.applied(change, inp.region, self.state)
        except ApplicationError:
            if previous is None:
                self.state.overrides.pop(inp.region, None)
            else:
                self.state.overrides[inp.region] = previous
            self._remember()
            raise

    @set_override.validator
    def _validate_set_override(self, inp: SetOverrideInput) -> None:
        raise ApplicationError(
            UPDATE_REPLACED.format(name="set_override", signal="request_override"),
            type="InvalidRequest",
        )

    @workflow.update
    async def clear_override(self, inp: ClearOverrideInput) -> OverrideApplied:
        if self.state.overrides.pop(inp.region, None) is None:
            return OverrideApplied(
                epoch=self.state.epoch,
                version=self.state.last_good_version,
                region_share=self.state.shares.get(inp.region),
            )
        self._remember()
        if inp.restore_fractions is not None:
            self.restore_fractions = inp.restore_fractions
        change, self.wake = self.overrides.new(), True
        if not inp.wait_applied:
            return OverrideApplied(epoch=self.state.epoch, version=None, region_share=None)
        return await self.overrides.applied(change, inp.region, self.state)

    @clear_override.validator
    def _validate_clear_override(self, inp: ClearOverrideInput) -> None:
        raise ApplicationError(
            UPDATE_REPLACED.format(name="clear_override", signal="release_override"),
            type="InvalidRequest",
        )
