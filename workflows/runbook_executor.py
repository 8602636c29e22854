"""How one runbook task runs: pre-check, steps with health gates, post-check.

Each template's step is one call here; what a step changed is recorded as the
task's :class:`Undo` *before* the next step, so a rollback can put back exactly
what was applied. Mutations carry the key ``<workflow>/<run>/<task>/<step>``,
stable across worker restarts, so a replayed step is not applied twice.

What a step acts on (the shards to move, the jobs to stop) is read once, before
the first mutation, and kept in the task's state: an activity retried after a
partial apply would otherwise read a world it has half changed and record less
than it moved. A restore run puts back the values its drain recorded
(``records``, by restore task id), not the ones it finds: by then the drain has
changed them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, assert_never

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.fleet_reads import FleetReadActivities
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.overrides import OverrideActivities
    from orchestrator.activities.runbook import (
        ConfigInput,
        JobsInput,
        RunbookActivities,
        ShardStepInput,
        WeightInput,
    )
    from orchestrator.contracts.rebalancer import ClearOverrideInput, SetOverrideInput
    from orchestrator.contracts.runbook import TaskState, Undo, override_owner
    from orchestrator.contracts.runbook_undo import (
        HostsQuarantine,
        HostsRelease,
        JobUpdate,
        RunbookUndo,
        ServiceWeight,
        ServiceWeightArgs,
        ShardReturn,
        TrafficRelease,
        TrafficReleaseArgs,
    )
    from orchestrator.models import ConfigChange, ServiceWeightChange
    from orchestrator.runbook.spec import Runbook, RunMode, Task
    from workflows.runbook_children import ChildTemplates
    from workflows.runbook_state import StateTemplates
    from workflows.runbook_steps import (
        RETRY,
        SHORT,
        TaskFailed,
        building_of,
        cancellation,
        check,
        step_summary,
    )
    from workflows.runbook_training import TrainingTemplates

__all__ = ["RETRY", "TaskFailed", "TemplateExecutor", "check"]


class TemplateExecutor(StateTemplates, ChildTemplates, TrainingTemplates):
    """Applies one step of a task's template and records its undo."""

    def __init__(
        self,
        key_prefix: str,
        approvals: Callable[[str], object | None],
        *,
        mode: RunMode = "real",
        requested_by: str = "runbook",
        nested: dict[str, Runbook] | None = None,
        depth: int = 0,
    ) -> None:
        self.key_prefix = key_prefix
        self.approved = approvals
        self.mode = mode
        self.requested_by = requested_by
        self.nested = nested or {}
        #: how deep this run is nested (0: started by a person, a trigger or a schedule)
        self.depth = depth
        self.records = {}
        self.read_first = True

    async def apply(self, task: Task, args: Any, state: TaskState, point: float, step: int) -> None:
        handler = getattr(self, f"_{task.template}", None)
        if handler is None:
            raise TaskFailed(f"template {task.template} has no executor in this worker")
        await handler(task, args, state, point, step)

    # --- mutating templates --------------------------------------------------

    async def _traffic_shift(
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
        recorded = self._recorded(task.id, TrafficRelease)
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
            await self._release(region, found)
            return
        share = max(0.0, min(1.0, start + point * (target - start)))
        await workflow.execute_activity_method(
            OverrideActivities.request,
            SetOverrideInput(
                region=region,
                owner=override_owner(region),
                reason=f"{self.key_prefix}/{task.id} step {step}",
                max_share=share,
            ),
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )

    async def _release(self, region: str, table: dict[str, dict[str, float]] | None = None) -> None:
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

    async def _service_weight(
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
        recorded = self._recorded(task.id, ServiceWeight)
        if recorded is not None and (recorded.args.region, recorded.args.service) == (
            args.region,
            args.service,
        ):
            target = recorded.args.weight
        weight = before + point * (target - before)
        await self._set_weight(args.region, args.service, weight, self.key(task.id, step))

    async def _set_weight(self, region: str, service: str, weight: float, key: str) -> None:
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

    async def _config_change(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        await workflow.execute_activity_method(
            RunbookActivities.change_config,
            ConfigInput(
                change=ConfigChange(
                    path=args.path, content=args.content, expected_rev=args.expected_rev
                ),
                key=self.key(task.id, step),
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )

    # --- undo ----------------------------------------------------------------

    async def undo(self, task_id: str, undo: Undo) -> None:
        key = self.key(task_id, "undo")
        match undo:
            case TrafficRelease(args=a):
                # Put back the very table found before the drain, not a re-solve.
                await self._release(a.region, a.table if not a.held else None)
            case ServiceWeight(args=a):
                await self._set_weight(a.region, a.service, a.weight, key)
            case ShardReturn(args=a):
                await workflow.execute_activity_method(
                    RunbookActivities.shift_shards,
                    ShardStepInput(
                        service=a.service,
                        region=a.region,
                        direction="in",
                        target_ratio=1.0,
                        moved=a.moved,
                        key=key,
                    ),
                    start_to_close_timeout=SHORT,
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=RETRY,
                    summary=step_summary(),
                    cancellation_type=cancellation(),
                )
            case JobUpdate(args=a):
                await workflow.execute_activity_method(
                    RunbookActivities.update_jobs,
                    JobsInput(operation=a.operation, jobs=a.jobs, key=key),
                    start_to_close_timeout=SHORT,
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=RETRY,
                    summary=step_summary(),
                    cancellation_type=cancellation(),
                )
            case RunbookUndo():
                await self._undo_runbook(task_id, undo)
            case HostsRelease() | HostsQuarantine():
                await self._undo_hosts(key, undo)
            case _:
                assert_never(undo)


def _traffic(state: TaskState) -> TrafficReleaseArgs:
    """The traffic_release undo a traffic_shift task recorded at its first step."""
    if not isinstance(state.undo, TrafficRelease):
        kind = state.undo.template if state.undo else "no"
        raise TaskFailed(f"traffic_shift task {state.id} holds {kind} undo, not traffic_release")
    return state.undo.args
