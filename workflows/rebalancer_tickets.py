"""Override requests as tickets: taken at once, settled by an epoch, read by a query.

A drain or a load test sends its set or clear as a signal naming a ticket. The
signal handler validates it, records it and wakes the loop, and never awaits:
nothing stays open on the rebalancer while an epoch settles the request (an
Update held open until then hit Temporal's limit of 10 in flight per workflow,
and its acceptance could land beside the loop's commands in an order a replay
does not reproduce: temporalio/sdk-python#1591). The owner polls the
``override_ticket`` query for the outcome. Pure workflow-side state: no I/O.

An epoch settles every request pending when it began (FIFO). A set the epoch
could not honour is withdrawn (the hold before it is put back), so nothing is
half-applied; the owner reads the same named error the Update used to raise.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.rebalancer import (
        KEPT_TICKETS,
        ClearOverrideInput,
        OverrideTicket,
        PendingOverride,
        RebalancerState,
        SetOverrideInput,
    )
    from workflows.rebalancer_overrides import make_override, set_override_refusal

__all__ = ["find_ticket", "known", "settle_tickets", "take_clear", "take_set"]


def known(state: RebalancerState, ticket: str) -> bool:
    """Whether this ticket was taken already (a request sent again by a retry)."""
    return find_ticket(state, ticket).outcome != "unknown"


def find_ticket(state: RebalancerState, ticket: str) -> OverrideTicket:
    for pending in state.pending:
        if pending.ticket.ticket == ticket:
            return pending.ticket
    for settled in reversed(state.settled):
        if settled.ticket == ticket:
            return settled
    return OverrideTicket(ticket=ticket, region="", owner="", kind="", outcome="unknown")


def _keep(state: RebalancerState, ticket: OverrideTicket) -> None:
    state.settled = [*state.settled, ticket][-KEPT_TICKETS:]


def _refused(state: RebalancerState, ticket: OverrideTicket, exc: ApplicationError) -> None:
    _keep(
        state,
        ticket.model_copy(
            update={"outcome": "failed", "error_type": exc.type or "", "error": exc.message}
        ),
    )


def take_set(
    state: RebalancerState,
    inp: SetOverrideInput,
    ticket: str,
    target_utilization: float,
    now: datetime,
) -> bool:
    """Take a set request; True when it changed the holds (an epoch must settle it).

    A request the fleet cannot take (paused, held by another owner, unsafe) is settled
    as failed at once with the refusal the Update's validator gave.
    """
    record = OverrideTicket(ticket=ticket, region=inp.region, owner=inp.owner, kind="set")
    try:
        set_override_refusal(state, inp, target_utilization)
        override = make_override(inp, now)
    except ApplicationError as exc:
        _refused(state, record, exc)
        return False
    previous = state.overrides.get(inp.region)
    state.overrides[inp.region] = override
    state.pending.append(PendingOverride(ticket=record, override=override, previous=previous))
    return True


def take_clear(state: RebalancerState, inp: ClearOverrideInput, ticket: str) -> bool:
    """Take a clear request; True when it lifted a hold (an epoch must settle it)."""
    record = OverrideTicket(ticket=ticket, region=inp.region, owner=inp.owner, kind="clear")
    held = state.overrides.get(inp.region)
    if held is not None and held.owner != inp.owner:
        conflict = ApplicationError(
            f"region {inp.region} is held by {held.owner}, not {inp.owner}",
            type="OverrideConflict",
        )
        _refused(state, record, conflict)
        return False
    if held is None:
        # Nothing to lift: the table in force already honours the request.
        _keep(state, _applied(state, record))
        return False
    del state.overrides[inp.region]
    state.pending.append(PendingOverride(ticket=record, previous=held))
    return True


def _applied(state: RebalancerState, ticket: OverrideTicket) -> OverrideTicket:
    return ticket.model_copy(
        update={
            "outcome": "applied",
            "epoch": state.epoch,
            "version": state.last_good_version,
            "region_share": state.shares.get(ticket.region),
        }
    )


def settle_tickets(state: RebalancerState, count: int, failure: str | None = None) -> bool:
    """Settle the ``count`` oldest pending requests; with ``failure``, as refused.

    Returns whether the holds changed (a set withdrawn), so the caller rewrites the memo.
    """
    done, state.pending = state.pending[:count], state.pending[count:]
    changed = False
    if failure is not None:
        # Newest first, so two failed sets on one region put back the hold before both.
        for pending in reversed(done):
            if pending.override is None:
                continue
            region = pending.ticket.region
            if state.overrides.get(region) != pending.override:
                continue  # a later request replaced it: that one stands
            if pending.previous is None:
                del state.overrides[region]
            else:
                state.overrides[region] = pending.previous
            changed = True
    for pending in done:
        ticket = pending.ticket
        if failure is None:
            _keep(state, _applied(state, ticket))
        else:
            error = f"override on {ticket.region} could not be applied: {failure}"
            _keep(
                state,
                ticket.model_copy(
                    update={"outcome": "failed", "error_type": "Infeasible", "error": error}
                ),
            )
    return changed
