"""Override bookkeeping for TrafficRebalanceWorkflow: validation and "applied yet?".

Every override change (set or clear) gets a number; an epoch that begins after
the change settles it, by publishing a table that honours it or by failing to.
An Update waits for its change to settle and answers with the result, so a
drain or a load test knows its hold is in force before it moves on. Pure
workflow-side state: deterministic, no I/O.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.rebalancer import (
        OverrideApplied,
        RebalancerState,
        SetOverrideInput,
    )
    from orchestrator.policy.rebalance.inputs import Override, override_refusal

__all__ = ["OverrideChanges", "capacity_shares", "make_override", "set_override_refusal"]


class OverrideChanges:
    """Numbered override changes and which of them an epoch has settled (or failed)."""

    def __init__(self) -> None:
        self.changes = 0
        self.settled = 0
        self.failed: dict[int, str] = {}

    @property
    def pending(self) -> bool:
        return self.changes > self.settled

    def new(self) -> int:
        self.changes += 1
        return self.changes

    def settle(self, changes: int, failure: str | None = None) -> None:
        """Every change up to ``changes`` is settled; with ``failure``, as refused."""
        if failure is not None:
            for change in range(self.settled + 1, changes + 1):
                self.failed[change] = failure
        self.settled = max(self.settled, changes)

    async def applied(self, change: int, region: str, state: RebalancerState) -> OverrideApplied:
        await workflow.wait_condition(lambda: self.settled >= change)
        if change in self.failed:
            raise ApplicationError(
                f"override on {region} could not be applied: {self.failed.pop(change)}",
                type="Infeasible",
                non_retryable=True,
            )
        return OverrideApplied(
            epoch=state.epoch,
            version=state.last_good_version,
            region_share=state.shares.get(region),
        )


def make_override(inp: SetOverrideInput, now: datetime | None) -> Override:
    try:
        return Override(
            region=inp.region,
            owner=inp.owner,
            reason=inp.reason,
            max_share=inp.max_share,
            pin_share=inp.pin_share,
            capacity_fraction=inp.capacity_fraction,
            set_at=now,
        )
    except ValueError as exc:
        raise ApplicationError(
            f"invalid override: {exc}", type="InvalidRequest", non_retryable=True
        ) from None


def set_override_refusal(
    state: RebalancerState, inp: SetOverrideInput, target_utilization: float
) -> None:
    """Raise the refusal of ``set_override`` (paused, held by another owner, unsafe)."""
    if state.paused_by is not None:
        raise ApplicationError(f"rebalancer paused by {state.paused_by}", type="UnsafeRequest")
    override = make_override(inp, None)
    held = state.overrides.get(inp.region)
    if held is not None and held.owner != inp.owner:
        raise ApplicationError(
            f"region {inp.region} is held by {held.owner} ({held.reason})",
            type="OverrideConflict",
        )
    if state.view is None:
        raise ApplicationError(
            "no trusted view of the fleet yet; retry after the first epoch",
            type="UnsafeRequest",
        )
    refusal = override_refusal(
        state.view, list(state.overrides.values()), override, target_utilization
    )
    if refusal is not None:
        raise ApplicationError(f"override on {inp.region} refused: {refusal}", type="UnsafeRequest")


def capacity_shares(state: RebalancerState) -> dict[str, float]:
    """Region -> its share of all capacity among active regions (the "fair" share)."""
    if state.view is None:
        return {}
    active = [r for r in state.view.regions if r.status == "active"]
    total = sum(r.capacity for r in active)
    return {r.name: r.capacity / total for r in active} if total > 0 else {}
