"""The templates that change the fleet's routing and configuration: ``traffic_shift``,
``service_weight`` and ``config_change``.

``traffic_shift`` records, at its first step, the share and the routing table it found
(a building's shift, the building's share of its region too); the undo lifts the hold and
puts back that very table. A restore run goes back to what its drain found, not to what
it finds: by then the drain has changed it. ``service_weight`` records the weight it
found; ``config_change`` records no undo. A weight task whose first write the fleet
refused (a 4xx: it applied nothing) keeps no undo, as a nested runbook refused at start
does (workflows/runbook_children.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.fleet_reads import FleetReadActivities
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.overrides import OverrideActivities
    from orchestrator.activities.runbook import (
        ConfigInput,
        RunbookActivities,
        WeightInput,
    )
    from orchestrator.contracts.rebalancer import ClearOverrideInput, SetOverrideInput
    from orchestrator.contracts.runbook import TaskState, override_owner
    from orchestrator.contracts.runbook_undo import (
        ServiceWeight,
        ServiceWeightArgs,
        TrafficRelease,
        TrafficReleaseArgs,
    )
    from orchestrator.exceptions import FleetNotFound, FleetRejected, InvalidRequest
    from orchestrator.models import ConfigChange, ServiceWeightChange
    from orchestrator.runbook.spec import Task
    from workflows.runbook_steps import (
        RETRY,
        SHORT,
        StepContext,
        TaskFailed,
        building_of,
        cancellation,
        step_summary,
    )

__all__ = ["RoutingSteps"]

#: runs from before this kept the undo of a weight task whose first write the fleet refused,
#: so their rollback wrote the same refused request again and ended rollback_failed with
#: everything put back; only a refused first write asks, so other histories replay unchanged
REFUSED_WEIGHT_PATCH = "refused-weight-write-leaves-no-undo"
#: the fleet's answers that refuse the request itself: a 4xx applies nothing (fleet contract)
REFUSALS = frozenset(e.type_name() for e in (FleetRejected, FleetNotFound, InvalidRequest))


def refused(exc: ActivityError) -> bool:
    cause = exc.cause
    return isinstance(cause, ApplicationError) and cause.type in REFUSALS


class RoutingSteps:
    """Steps of traffic_shift, service_weight and config_change, and what their undo calls."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx

    async def traffic_shift(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        region, share = args.region, 1.0
        if args.building is not None:
            if state.undo is None:
                region, share = await building_of(args.building)
            else:
                undone = _traffic(state)
                region = undone.region
                share = 1.0 if undone.building_share is None else undone.building_share
        # A building's share of its region's traffic moves and the rest stays (a region's
        # share is 1: the ratio is the region's).
        keep = 1.0 - share * (1.0 - args.ratio)
        recorded = self.ctx.recorded(task.id, TrafficRelease)
        if recorded is not None and recorded.args.region != region:
            recorded = None
        if state.undo is None:
            status = await workflow.execute_activity_method(
                OverrideActivities.status,
                start_to_close_timeout=SHORT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RETRY,
                summary=step_summary(),
                cancellation_type=cancellation(),
            )
            table = await workflow.execute_activity_method(
                FleetReadActivities.read_routing,
                start_to_close_timeout=SHORT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RETRY,
                summary=step_summary(),
                cancellation_type=cancellation(),
            )
            start = status.shares.get(region, 0.0)
            held = any(o.region == region for o in status.overrides)
            # A restore lifts a hold, so "normal" is the share the drain found before it
            # (or, with no record of it, the region's fair share of capacity).
            normal = status.capacity_shares.get(region, start) if held else start
            if recorded is not None:
                normal = recorded.args.normal
            first = TrafficReleaseArgs(
                region=region, start=start, normal=normal, held=held, table=table.fractions
            )
            if args.building is not None:
                first.building, first.building_share = args.building, share
            state.undo = TrafficRelease(args=first)
        undone = _traffic(state)
        start, normal = undone.start, undone.normal
        target = keep * normal
        if point >= 1.0 and args.ratio >= 1.0:
            # The table the drain found, if the fleet can still take it; else a re-solve.
            found = None
            if recorded is not None and not recorded.args.held:
                found = recorded.args.table
            await self.release(region, found)
            return
        share = max(0.0, min(1.0, start + point * (target - start)))
        await workflow.execute_activity_method(
            OverrideActivities.request,
            SetOverrideInput(
                region=region,
                owner=override_owner(region),
                reason=f"{self.ctx.key_prefix}/{task.id} step {step}",
                max_share=share,
            ),
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )

    async def release(self, region: str, table: dict[str, dict[str, float]] | None = None) -> None:
        await workflow.execute_activity_method(
            OverrideActivities.release,
            ClearOverrideInput(
                region=region, owner=override_owner(region), restore_fractions=table
            ),
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )

    async def service_weight(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        if state.undo is None:
            before = await workflow.execute_activity_method(
                RunbookActivities.read_weight,
                ServiceWeightChange(region=args.region, service=args.service, weight=args.weight),
                start_to_close_timeout=SHORT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RETRY,
                summary=step_summary(),
                cancellation_type=cancellation(),
            )
            state.undo = ServiceWeight(
                args=ServiceWeightArgs(region=args.region, service=args.service, weight=before)
            )
        if not isinstance(state.undo, ServiceWeight):
            raise TaskFailed(f"service_weight task holds a {state.undo.template} undo")
        before = state.undo.args.weight
        target = args.weight
        recorded = self.ctx.recorded(task.id, ServiceWeight)
        if recorded is not None and (recorded.args.region, recorded.args.service) == (
            args.region,
            args.service,
        ):
            target = recorded.args.weight
        weight = before + point * (target - before)
        try:
            await self.set_weight(args.region, args.service, weight, self.ctx.key(task.id, step))
        except ActivityError as exc:
            # Nothing applied yet and this write refused: the undo would write the same
            # refused request and turn a clean rollback into rollback_failed.
            if state.step == 0 and refused(exc) and workflow.patched(REFUSED_WEIGHT_PATCH):
                state.undo = None
            raise

    async def set_weight(self, region: str, service: str, weight: float, key: str) -> None:
        await workflow.execute_activity_method(
            RunbookActivities.set_weight,
            WeightInput(
                change=ServiceWeightChange(region=region, service=service, weight=round(weight, 6)),
                key=key,
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )

    async def config_change(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        await workflow.execute_activity_method(
            RunbookActivities.change_config,
            ConfigInput(
                change=ConfigChange(
                    path=args.path, content=args.content, expected_rev=args.expected_rev
                ),
                key=self.ctx.key(task.id, step),
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )


def _traffic(state: TaskState) -> TrafficReleaseArgs:
    """The traffic_release undo a traffic_shift task recorded at its first step."""
    if not isinstance(state.undo, TrafficRelease):
        kind = state.undo.template if state.undo else "no"
        raise TaskFailed(f"traffic_shift task {state.id} holds {kind} undo, not traffic_release")
    return state.undo.args
