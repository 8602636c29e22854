"""Templates whose steps act on a set read from the fleet (kv primaries, batch
jobs), and the drain records a restore puts back.

The set is read once, before the first mutation, and kept in the task's state:
an activity that read it itself, retried after a partial apply, would find a
world it had half changed and record less than it moved (and the restore would
leave the rest behind).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.runbook import JobsInput, RunbookActivities, ShardStepInput
    from orchestrator.contracts.runbook import TaskState
    from orchestrator.contracts.runbook_undo import (
        JobUpdate,
        JobUpdateArgs,
        ShardReturn,
        ShardReturnArgs,
    )
    from orchestrator.runbook.spec import Task
    from workflows.runbook_steps import RETRY, SHORT, StepContext, cancellation, step_summary

__all__ = ["ShardAndJobSteps"]


class ShardAndJobSteps:
    """Steps of shard_shift and job_update."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx

    async def shard_shift(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        if args.direction == "out" and self.ctx.read_first:
            await self._shards_out(task, args, state, point, step)
            return
        moved = list(state.undo.args.moved) if isinstance(state.undo, ShardReturn) else []
        recorded = self.ctx.recorded(task.id, ShardReturn)
        if args.direction == "in" and recorded is not None and recorded.args.region == args.region:
            moved = list(recorded.args.moved)
        result = await workflow.execute_activity_method(
            RunbookActivities.shift_shards,
            ShardStepInput(
                service=args.service,
                region=args.region,
                direction=args.direction,
                peers=args.peers,
                target_ratio=point * args.ratio,
                moved=moved,
                key=self.ctx.key(task.id, step),
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )
        if args.direction == "out":
            state.undo = ShardReturn(
                args=ShardReturnArgs(service=args.service, region=args.region, moved=result)
            )

    async def _shards_out(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        if not isinstance(state.undo, ShardReturn):
            owned = await workflow.execute_activity_method(
                RunbookActivities.read_primaries,
                ShardStepInput(
                    service=args.service, region=args.region, direction="out", target_ratio=0
                ),
                start_to_close_timeout=SHORT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RETRY,
                summary=step_summary(),
                cancellation_type=cancellation(),
            )
            state.undo = ShardReturn(
                args=ShardReturnArgs(
                    service=args.service, region=args.region, moved=[], owned=owned
                )
            )
        undo = state.undo.args
        owned, moved = undo.owned or [], list(undo.moved)
        chosen = owned[: math.ceil(point * args.ratio * len(owned) - 1e-9)]
        # Recorded before the move: a rollback after a crash mid-step returns these too
        # (the return leaves alone any that never left).
        undo.moved = chosen
        await workflow.execute_activity_method(
            RunbookActivities.shift_shards,
            ShardStepInput(
                service=args.service,
                region=args.region,
                direction="out",
                peers=args.peers,
                target_ratio=point * args.ratio,
                moved=moved,
                shards=chosen,
                key=self.ctx.key(task.id, step),
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )

    async def job_update(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        flipped: Literal["start", "stop"] = "start" if args.operation == "stop" else "stop"
        jobs, region = list(args.jobs), args.region
        recorded = self.ctx.recorded(task.id, JobUpdate)
        if recorded is not None and recorded.args.operation == args.operation:
            jobs, region = list(recorded.args.jobs), None  # exactly those, even none
        elif self.ctx.read_first and not jobs and region is not None:
            if not isinstance(state.undo, JobUpdate):
                listed = await workflow.execute_activity_method(
                    RunbookActivities.read_jobs,
                    JobsInput(operation=args.operation, region=region),
                    start_to_close_timeout=SHORT,
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=RETRY,
                    summary=step_summary(),
                    cancellation_type=cancellation(),
                )
                state.undo = JobUpdate(args=JobUpdateArgs(operation=flipped, jobs=listed))
            jobs, region = list(state.undo.args.jobs), None
        jobs = await workflow.execute_activity_method(
            RunbookActivities.update_jobs,
            JobsInput(
                operation=args.operation, jobs=jobs, region=region, key=self.ctx.key(task.id, step)
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )
        state.undo = JobUpdate(args=JobUpdateArgs(operation=flipped, jobs=jobs))
