"""Templates that wait or talk rather than change the fleet: wait_for,
approval, notify and delay."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.runbook import HoldInput, NotifyInput, RunbookActivities
    from orchestrator.contracts.runbook import TaskState
    from orchestrator.runbook.spec import Task
    from workflows.runbook_steps import (
        RETRY,
        SHORT,
        NothingToDo,
        StepContext,
        TaskFailed,
        cancellation,
        check,
        step_summary,
    )

__all__ = ["WaitSteps"]


class WaitSteps:
    """Steps of wait_for, approval, notify and delay."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx

    async def wait_for(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        deadline = workflow.now() + timedelta(seconds=args.timeout)
        while True:
            result = await check(args.predicates)
            if result.ok:
                return
            state.message = result.message
            if workflow.now() >= deadline:
                raise TaskFailed(f"wait_for timed out: {result.message}")
            await workflow.sleep(args.poll_interval)

    async def approval(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        state.message = f"waiting for approval by one of {', '.join(args.approvers)}"
        try:
            await workflow.wait_condition(
                lambda: self.ctx.approved(task.id) is not None,
                timeout=timedelta(seconds=args.timeout),
            )
        except TimeoutError:
            raise TaskFailed(f"no approval within {args.timeout:.0f}s") from None
        state.message = f"approved: {self.ctx.approved(task.id)}"

    async def notify(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        if not args.url:
            raise NothingToDo("no url given: nobody was notified")
        await workflow.execute_activity_method(
            RunbookActivities.notify,
            NotifyInput(url=str(args.url), message=args.message, key=self.ctx.key(task.id, step)),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )

    async def delay(self, task: Task, args: Any, state: TaskState, point: float, step: int) -> None:
        if args.as_activity:
            await workflow.execute_activity_method(
                RunbookActivities.hold,
                HoldInput(seconds=args.duration),
                start_to_close_timeout=timedelta(seconds=args.duration) + SHORT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RETRY,
                summary=step_summary(),
                cancellation_type=cancellation(),
            )
            return
        await workflow.sleep(args.duration)
