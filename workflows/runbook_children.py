"""Templates that run another workflow as a child: ``runbook`` (a nested
RunbookWorkflow) and ``load_test`` (a LiveLoadTestWorkflow).

A child's id is ``<parent id>/<task id>``, stable across worker restarts, so a
replayed parent finds the child it started instead of starting a second one.

A nested run carries its depth; one that would run deeper than
``MAX_NESTING_DEPTH`` fails its task instead of starting, so runbooks that run
each other (which lint refuses, but a parameter can name any runbook) end
instead of starting child runs until Temporal refuses the workflow id.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from orchestrator.clients.runbook_runs import report_of
    from orchestrator.contracts.load_test import LoadTestInput, LoadTestResult
    from orchestrator.contracts.runbook import (
        RUNBOOK_WORKFLOW,
        RunbookReport,
        RunbookRunInput,
        TaskState,
    )
    from orchestrator.contracts.runbook_undo import RunbookUndo, RunbookUndoArgs
    from orchestrator.exceptions import InvalidInstance, OrchestratorError, UnsafeRequest
    from orchestrator.runbook.params import bind
    from orchestrator.runbook.spec import MAX_NESTING_DEPTH, Runbook, RunMode, Task
    from workflows.runbook_steps import StepContext, TaskFailed, failure_reason

__all__ = ["NESTING_DEPTH_PATCH", "REFUSED_CHILD_PATCH", "ChildSteps", "refused_at_start"]

LOAD_TEST_WORKFLOW = "LiveLoadTestWorkflow"
#: runs from before this started nested runs at any depth; only a run about to go past
#: the limit asks, so histories within it replay unchanged
NESTING_DEPTH_PATCH = "nested-runbook-depth-limit"
#: runs from before this kept the undo of a nested runbook its child refused at start, so
#: their rollback ran a restore that had no record to read; only a refused child asks
REFUSED_CHILD_PATCH = "refused-child-leaves-no-undo"
#: what a RunbookWorkflow fails with when its start-up (workflows/runbook_start.py) refuses
#: it, before any task changed anything -> what refused it
START_REFUSALS = {
    UnsafeRequest.type_name(): "its capacity check",
    InvalidInstance.type_name(): "its start-up checks",
}


def refused_at_start(exc: ChildWorkflowError) -> str | None:
    """What refused the child run before its first task (so it changed nothing), or None.

    Only start-up fails a run with its own error of these types: a run that reached its
    tasks fails with its report (``RunNotCompleted``), an activity's refusal arrives
    wrapped in an ActivityError, and a terminated or timed-out child carries neither.
    """
    cause = exc.cause
    return START_REFUSALS.get(cause.type or "") if isinstance(cause, ApplicationError) else None


class ChildSteps:
    """Steps of runbook and load_test, and the undo of a nested runbook."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx

    def _bound(self, ref: str, parameters: dict[str, Any]) -> Runbook:
        found = self.ctx.nested.get(ref)
        if found is None:
            known = ", ".join(sorted(self.ctx.nested)) or "none"
            raise TaskFailed(f"nested runbook {ref!r} was not given at start (given: {known})")
        try:
            return bind(found, parameters)
        except (OrchestratorError, ValueError) as exc:
            raise TaskFailed(f"nested runbook {ref}: {exc}") from None

    async def _child_runbook(
        self, rb: Runbook, mode: RunMode, child_id: str, restore_of: str | None = None
    ) -> RunbookReport:
        depth = self.ctx.depth + 1
        if depth > MAX_NESTING_DEPTH and workflow.patched(NESTING_DEPTH_PATCH):
            raise TaskFailed(
                f"nested runbook {rb.name} would run {depth} levels deep, more than the "
                f"limit of {MAX_NESTING_DEPTH} (do nested runbooks run each other?)"
            )
        try:
            report: RunbookReport = await workflow.execute_child_workflow(
                RUNBOOK_WORKFLOW,
                RunbookRunInput(
                    runbook=rb,
                    mode=mode,
                    requested_by=self.ctx.requested_by,
                    nested=self.ctx.nested,
                    restore_of=restore_of,
                    depth=depth,
                ),
                id=child_id,
                result_type=RunbookReport,
            )
        except ChildWorkflowError as exc:
            # A child that did not complete fails its workflow, with its report attached.
            failed = report_of(exc)
            if failed is None:
                raise
            return failed
        return report

    async def runbook(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        rb = self._bound(args.runbook, args.parameters)
        mode: RunMode = self.ctx.mode if args.mode == "inherit" else args.mode
        if rb.restore_runbook and state.undo is None:
            # Recorded before the child starts: an abort while it runs still restores.
            state.undo = RunbookUndo(
                args=RunbookUndoArgs(
                    runbook=rb.restore_runbook, parameters=args.parameters, mode=mode
                )
            )
        child_id = f"{workflow.info().workflow_id}/{task.id}"
        state.message = f"running {rb.name} as {child_id}"
        # A task that undoes a nested drain restores what that child recorded.
        undoes = f"{workflow.info().workflow_id}/{task.undoes}" if task.undoes else None
        try:
            report = await self._child_runbook(rb, mode, child_id, undoes)
        except ChildWorkflowError as exc:
            # A child refused at start has nothing to restore: its restore would find no
            # record of it and fail, turning the parent's rollback into rollback_failed.
            refused_by = refused_at_start(exc)
            if refused_by and state.undo is not None and workflow.patched(REFUSED_CHILD_PATCH):
                state.undo = None
                raise TaskFailed(
                    f"nested runbook {rb.name} refused by {refused_by}, changed nothing: "
                    f"{failure_reason(exc)}"
                ) from None
            raise
        if report.outcome != "completed":
            raise TaskFailed(f"nested runbook {rb.name} ended {report.outcome}")
        state.message = f"{rb.name} completed in {report.critical_path_s:.1f}s critical path"

    async def undo_runbook(self, task_id: str, undo: RunbookUndo) -> None:
        rb = self._bound(undo.args.runbook, undo.args.parameters)
        parent = workflow.info().workflow_id
        child_id = f"{parent}/{task_id}/restore"
        report = await self._child_runbook(
            rb, undo.args.mode or self.ctx.mode, child_id, restore_of=f"{parent}/{task_id}"
        )
        if report.outcome != "completed":
            raise TaskFailed(f"restore runbook {rb.name} ended {report.outcome}")

    async def load_test(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        if step > 1:
            return  # the load test steps itself; the task's steps do not repeat it
        base = LoadTestInput(
            region=args.region,
            service=args.service or "web",
            p99_slo_ms=args.p99_slo_ms,
            max_error_rate=args.max_error_rate,
            max_utilization=args.max_utilization,
            window_s=args.window_s,
            settle_s=args.settle_s,
            max_steps=args.max_steps,
            reason=f"{self.ctx.key_prefix}/{task.id}",
        )
        metrics = [m for m in base.watched_metrics() if m.key in args.metrics]
        inp = base.model_copy(update={"metrics": metrics or None})
        child_id = f"{workflow.info().workflow_id}/{task.id}"
        state.message = f"load test {child_id} on {args.region}"
        result: LoadTestResult = await workflow.execute_child_workflow(
            LOAD_TEST_WORKFLOW, inp, id=child_id, result_type=LoadTestResult
        )
        summary = (
            f"{result.outcome}: {result.estimate.load:.0f} rps "
            f"({result.capacity_ratio:.0%} of theoretical), bottleneck {result.bottleneck or '-'}"
        )
        if result.outcome == "error" or not result.routing_restored:
            raise TaskFailed(f"load test {summary}; routing restored: {result.routing_restored}")
        state.message = summary
