"""The rebalancer's two touches of the world: plan an epoch, publish its table.

Planning reads the fleet and solves in one activity so that the (possibly
large) topology and health never enter workflow history; only the slim plan
does. Publishing carries an idempotency key derived from the run and the epoch
number, so a retried publish is answered from the fleet's record instead of
applied again, and no other run's epoch of the same number collides with it.

Planning also notices a fleet that lost its state: a routing version lower than
the last one seen, or a table that breaks a hold (a drained region carrying
traffic again). A broken hold is fixed in this epoch without the ramp (an
emergency step, said so in the plan): the ramp protects the other regions from
a sudden shift, but a drained region must not wait 40 epochs to be empty again.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field
from temporalio import activity

from orchestrator.activities.errors import reported
from orchestrator.exceptions import PolicyError, VersionConflict
from orchestrator.fleet.protocol import Fleet
from orchestrator.logging import get_logger
from orchestrator.models import HealthReport, RoutingTable, RoutingWrite, Topology
from orchestrator.policy.rebalance.inputs import (
    FleetView,
    Override,
    SkipEpoch,
    broken_holds,
    build_instance,
    restore_table,
)
from orchestrator.policy.rebalance.model import Constraints, SolverResult
from orchestrator.policy.rebalance.taiji import check, solve
from orchestrator.policy.rebalance.urgent import solve_urgent, urgent_constraints

__all__ = ["EpochPlan", "PlanEpochInput", "PublishInput", "PublishResult", "RebalanceActivities"]

log = get_logger(__name__)


class PlanEpochInput(BaseModel):
    overrides: list[Override] = Field(default_factory=list)
    constraints: Constraints = Field(default_factory=Constraints)
    service: str = "web"
    window_s: float | None = None
    #: an operator override is waiting: apply it in full this epoch, no ramp or dampening
    urgent: bool = False
    #: a table to put back verbatim when it still meets every constraint
    restore_fractions: dict[str, dict[str, float]] | None = None
    #: the routing version the previous epoch read (to notice it going backwards)
    seen_version: int | None = None


class EpochPlan(BaseModel):
    routing_version: int
    skip_reason: str | None = None
    #: skipped because the inputs cannot be trusted (missing or implausible data), which a
    #: later window may cure; an infeasible solve is not retried
    untrusted: bool = False
    note: str = ""
    view: FleetView | None = None
    #: the checked solution, without per-PoP outcomes (the fractions are the table)
    result: SolverResult | None = None
    #: the routing version went backwards since the last epoch: the fleet lost its state
    regression: str = ""
    #: the table broke a hold, so this plan lifted the ramp as far as fixing it needs (what
    #: was broken)
    emergency: str = ""

    @property
    def publishable(self) -> bool:
        return self.skip_reason is None and self.result is not None


class PublishInput(BaseModel):
    fractions: dict[str, dict[str, float]]
    if_match: int
    idempotency_key: str
    reason: str = ""


class PublishResult(BaseModel):
    version: int | None = None
    #: someone else changed the table since it was read: nothing was written
    conflict: bool = False


def plan(
    inp: PlanEpochInput, topology: Topology, routing: RoutingTable, health: HealthReport
) -> EpochPlan:
    """One epoch's plan from what was read: the checked solution, or why the epoch skips."""
    regression = ""
    if inp.seen_version is not None and routing.version < inp.seen_version:
        regression = (
            f"routing version went backwards (v{routing.version} after "
            f"v{inp.seen_version}): the fleet lost its state"
        )
        log.warning("fleet routing regressed", reason=regression)
    constraints = urgent_constraints(inp.constraints) if inp.urgent else inp.constraints
    try:
        instance, view = build_instance(
            topology, routing, health, inp.overrides, constraints, inp.service
        )
    except SkipEpoch as skip:
        return EpochPlan(
            routing_version=routing.version,
            skip_reason=skip.reason,
            untrusted=True,
            regression=regression,
        )
    broken = broken_holds(instance, inp.overrides)
    emergency = "" if inp.urgent else "; ".join(broken)
    if emergency:
        log.warning("routing breaks a hold: emergency step", broken=emergency)
        instance = instance.model_copy(update={"constraints": urgent_constraints(inp.constraints)})
    try:
        if broken:  # a new cap or pin to apply, or a hold the table lost: only as far as needed
            result = solve_urgent(instance, inp.constraints)
        else:
            result = solve(instance)
            check(instance, result)
    except PolicyError as exc:
        log.warning("epoch infeasible", reason=str(exc))
        return EpochPlan(
            routing_version=routing.version,
            skip_reason=str(exc),
            view=view,
            regression=regression,
            emergency=emergency,
        )
    note = ""
    if inp.restore_fractions is not None:
        restored = restore_table(instance, result, inp.restore_fractions)
        if isinstance(restored, str):
            note = f"previous table not restored ({restored}); solved instead"
            # a load test then reports its routing as not restored: the worker's log is
            # where the reason outlives the run (the status keeps only the last epochs)
            log.warning("previous table not restored", reason=restored)
        else:
            result, note = restored, "restored the table found before the override"
    # Per-PoP outcomes repeat the fractions (with bucket lists): no workflow reads them, and
    # at 1,000 PoPs they doubled the plan to 2.9 MB, past Temporal's 2 MB payload limit.
    slim = result.model_copy(update={"pops": []})
    return EpochPlan(
        routing_version=routing.version,
        view=view,
        result=slim,
        note=note,
        regression=regression,
        emergency=emergency,
    )


class RebalanceActivities:
    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    @activity.defn(name="plan_rebalance_epoch")
    @reported
    async def plan_epoch(self, inp: PlanEpochInput) -> EpochPlan:
        # Three reads at once: an override's urgent epoch is a step of a drain, which
        # waits for it (benchmarks/drain_haproxy.py: 0.5-0.8 s from request to table).
        topology, routing, health = await asyncio.gather(
            self._fleet.topology(), self._fleet.routing(), self._fleet.health(inp.window_s)
        )
        # The solve takes seconds at 1,000 PoPs x 50 regions; on the worker's event loop it
        # held up every workflow task and activity of the worker for that long
        # (benchmarks/many_runs.py), so it runs in a thread.
        return await asyncio.to_thread(plan, inp, topology, routing, health)

    @activity.defn(name="publish_routing")
    @reported
    async def publish(self, inp: PublishInput) -> PublishResult:
        try:
            table = await self._fleet.write_routing(
                RoutingWrite(fractions=inp.fractions, reason=inp.reason),
                if_match=inp.if_match,
                idempotency_key=inp.idempotency_key,
            )
        except VersionConflict:
            return PublishResult(conflict=True)
        return PublishResult(version=table.version)
