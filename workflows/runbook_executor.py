"""One step of a runbook task's template, and the undo of what the task changed.

A template's step is looked up in a table (template name -> the step of its family:
routing, shards and jobs, child runs, training, waits); what a step changed is recorded
as the task's typed :class:`Undo` *before* the next step, so a rollback can put back
exactly what was applied, chosen by the undo's type. Mutations carry the key
``<workflow>/<run>/<task>/<step>``, stable across worker restarts, so a replayed step is
not applied twice.

What a step acts on (the shards to move, the jobs to stop) is read once, before
the first mutation, and kept in the task's state: an activity retried after a
partial apply would otherwise read a world it has half changed and record less
than it moved. A restore run puts back the values its drain recorded
(``StepContext.records``, by restore task id), not the ones it finds: by then the
drain has changed them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, assert_never

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.runbook import (
        JobsInput,
        RunbookActivities,
        ShardStepInput,
    )
    from orchestrator.contracts.runbook import TaskState, Undo
    from orchestrator.contracts.runbook_undo import (
        HostsQuarantine,
        HostsRelease,
        JobUpdate,
        RunbookUndo,
        ServiceWeight,
        ShardReturn,
        TrafficRelease,
    )
    from orchestrator.runbook.spec import Task
    from workflows.runbook_children import ChildSteps
    from workflows.runbook_routing import RoutingSteps
    from workflows.runbook_shards_jobs import ShardAndJobSteps
    from workflows.runbook_steps import (
        RETRY,
        SHORT,
        StepContext,
        TaskFailed,
        cancellation,
        check,
        step_summary,
    )
    from workflows.runbook_training import TrainingSteps
    from workflows.runbook_waits import WaitSteps

__all__ = ["RETRY", "Step", "TaskFailed", "TemplateExecutor", "check"]

#: one step of a template: (task, its validated args, its state, progress point, step number)
Step = Callable[[Task, Any, TaskState, float, int], Awaitable[None]]


class TemplateExecutor:
    """Applies one step of a task's template and records its undo; puts back an undo."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx
        self.routing = RoutingSteps(ctx)
        self.children = ChildSteps(ctx)
        self.training = TrainingSteps(ctx)
        fleet_sets, waits = ShardAndJobSteps(ctx), WaitSteps(ctx)
        #: template name -> its step
        self.steps: dict[str, Step] = {
            "traffic_shift": self.routing.traffic_shift,
            "service_weight": self.routing.service_weight,
            "config_change": self.routing.config_change,
            "shard_shift": fleet_sets.shard_shift,
            "job_update": fleet_sets.job_update,
            "runbook": self.children.runbook,
            "load_test": self.children.load_test,
            "training_move": self.training.training_move,
            "hosts_quarantine": self.training.hosts_quarantine,
            "hosts_release": self.training.hosts_release,
            "wait_for": waits.wait_for,
            "approval": waits.approval,
            "notify": waits.notify,
            "delay": waits.delay,
        }

    async def apply(self, task: Task, args: Any, state: TaskState, point: float, step: int) -> None:
        step_of = self.steps.get(task.template)
        if step_of is None:
            raise TaskFailed(f"template {task.template} has no executor in this worker")
        await step_of(task, args, state, point, step)

    async def undo(self, task_id: str, undo: Undo) -> None:
        key = self.ctx.key(task_id, "undo")
        match undo:
            case TrafficRelease(args=a):
                # Put back the very table found before the drain, not a re-solve.
                await self.routing.release(a.region, a.table if not a.held else None)
            case ServiceWeight(args=a):
                await self.routing.set_weight(a.region, a.service, a.weight, key)
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
                await self.children.undo_runbook(task_id, undo)
            case HostsRelease() | HostsQuarantine():
                await self.training.undo_hosts(key, undo)
            case _:
                assert_never(undo)
