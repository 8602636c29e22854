"""How a RunbookWorkflow task's failure is handled, and the rollback at the end of a run.

A mixin like :class:`~workflows.runbook_checks.RunbookChecks`: a failed task
continues, pauses for an operator or rolls the run back, as its ``on_failure``
says. A rollback undoes every task that changed something, newest first; an undo
the fleet refuses is reported (``rollback_failed``) and the other undos still run.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import OperatorInput, TaskControlInput, TaskPhase, TaskState
    from orchestrator.runbook.spec import Task
    from workflows.runbook_executor import TaskFailed, TemplateExecutor
    from workflows.runbook_steps import ACTIVITY_FAILURE_PATCH, failure_reason

__all__ = ["RunbookFailures"]


class RunbookFailures:
    """on_failure and rollback over the run state that RunbookWorkflow keeps."""

    tasks: dict[str, TaskState]
    order: list[str]
    executor: TemplateExecutor
    state: str
    paused_by: str | None
    abort: OperatorInput | None
    rollback_reason: str | None
    skips: dict[str, TaskControlInput]
    _set: Callable[[str, TaskPhase, str], None]
    _event: Callable[[str], None]

    async def _on_failure(self, task: Task, state: TaskState, reason: str) -> None:
        self._event(f"{task.id}: {reason}")
        if task.on_failure == "continue":
            self._set(task.id, TaskPhase.FAILED, reason)
        elif task.on_failure == "pause":
            self._set(task.id, TaskPhase.BLOCKED, f"paused on failure: {reason}")
            self.paused_by = f"failure of {task.id}"
            await workflow.wait_condition(lambda: task.id in self.skips or self.abort is not None)
            if task.id in self.skips:
                self._set(
                    task.id,
                    TaskPhase.SKIPPED,
                    f"skipped by {self.skips[task.id].by} after: {reason}",
                )
        else:
            self._set(task.id, TaskPhase.FAILED, reason)
            self.rollback_reason = f"{task.id}: {reason}"

    async def _finish(self) -> str:
        if self.abort is None and self.rollback_reason is None:
            failed = [t.id for t in self.tasks.values() if t.phase == TaskPhase.FAILED]
            self.state = "failed" if failed else "completed"
            return self.state
        self.state = "rolling_back"
        why = self.rollback_reason or f"aborted by {self.abort.by if self.abort else 'an operator'}"
        self._event(f"rolling back: {why}")
        undo_failed = False
        for task_id in reversed(self.order):
            state = self.tasks[task_id]
            if state.undo is None:
                continue
            try:
                await self.executor.undo(task_id, state.undo)
            except (ActivityError, ChildWorkflowError, TaskFailed) as exc:
                # One undo the fleet refuses must not stop the others: say so and go on.
                if not workflow.patched(ACTIVITY_FAILURE_PATCH):
                    raise
                reason = exc.reason if isinstance(exc, TaskFailed) else failure_reason(exc)
                self._event(f"{task_id}: undo failed, left for an operator: {reason}")
                self._set(task_id, TaskPhase.FAILED, f"undo failed: {reason}")
                undo_failed = True
                continue
            self._set(task_id, TaskPhase.ROLLED_BACK, state.message)
        if undo_failed:
            self.state = "rollback_failed"
        else:
            self.state = "aborted" if self.abort is not None else "rolled_back"
        return self.state
