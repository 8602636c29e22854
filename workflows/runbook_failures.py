"""How a RunbookWorkflow task's failure is handled, and the rollback at the end of a run.

A mixin like :class:`~workflows.runbook_checks.RunbookChecks`: a failed task
continues, pauses for an operator or rolls the run back, as its ``on_failure``
says. A rollback undoes every task that changed something, newest first; an undo
the fleet refuses is reported (``rollback_failed``) and the other undos still run.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import (
        RunOutcome,
        SkipReason,
        TaskPhase,
        TaskState,
        unfinished,
        why_not_completed,
    )
    from orchestrator.runbook.spec import Task
    from workflows.runbook_executor import TaskFailed, TemplateExecutor
    from workflows.runbook_legacy import RunbookLegacy
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import CURRENT_STEP, failure_reason

__all__ = ["RunbookFailures"]


class RunbookFailures(RunbookLegacy):
    """on_failure and rollback over the run state that RunbookWorkflow keeps."""

    run_state: RunState
    executor: TemplateExecutor

    async def _on_failure(self, task: Task, state: TaskState, reason: str) -> None:
        self.run_state.event(f"{task.id}: {reason}")
        if task.on_failure == "continue" and self.run_state.truthful:
            self.run_state.skip(
                task.id,
                SkipReason.CONTINUED,
                f"failed, run went on (on_failure: continue): {reason}",
            )
        elif task.on_failure == "continue":
            self.run_state.set(task.id, TaskPhase.FAILED, reason)
        elif task.on_failure == "pause":
            self.run_state.paused_on_failure.add(task.id)
            self.run_state.set(task.id, TaskPhase.BLOCKED, f"paused on failure: {reason}")
            self.run_state.paused_by = f"failure of {task.id}"
            await workflow.wait_condition(
                lambda: task.id in self.run_state.skips or self.run_state.abort is not None
            )
            if task.id in self.run_state.skips:
                self.run_state.skip(
                    task.id,
                    SkipReason.OPERATOR,
                    f"skipped by {self.run_state.skips[task.id].by} after: {reason}",
                )
                # The skip answers the pause this failure made (an operator's own pause stays).
                if self.run_state.truthful and self.run_state.paused_by == f"failure of {task.id}":
                    self.run_state.paused_by = None
        else:
            self.run_state.set(task.id, TaskPhase.FAILED, reason)
            self.run_state.rollback_reason = f"{task.id}: {reason}"

    async def _finish(self) -> str:
        if not self.run_state.truthful:
            return await self._finish_unpatched()
        if self.run_state.abort is None and self.run_state.rollback_reason is None:
            # The invariant: completed means every task done, or skipped with a reason.
            for t in unfinished(list(self.run_state.tasks.values())):
                self.run_state.set(
                    t.id, TaskPhase.FAILED, f"left {t.phase.value} when the run ended"
                )
            problems = why_not_completed(list(self.run_state.tasks.values()))
            if problems:
                self.run_state.why = "; ".join(problems)
                self.run_state.event(f"not completed: {self.run_state.why}")
                self.run_state.state = RunOutcome.FAILED
            else:
                self.run_state.state = RunOutcome.COMPLETED
            return self.run_state.state
        self.run_state.state = "rolling_back"
        why = (
            self.run_state.rollback_reason
            or f"aborted by {self.run_state.abort.by if self.run_state.abort else 'an operator'}"
        )
        self.run_state.why = why
        self.run_state.event(f"rolling back: {why}")
        undo_failed = await self._undo_all()
        for t in unfinished(list(self.run_state.tasks.values())):
            if t.phase == TaskPhase.PENDING:
                self.run_state.skip(t.id, SkipReason.RUN_ENDED, f"not started: {why}")
            elif t.phase == TaskPhase.BLOCKED and t.id in self.run_state.paused_on_failure:
                self.run_state.set(t.id, TaskPhase.FAILED, t.message)
            else:
                self.run_state.set(
                    t.id, TaskPhase.CANCELLED, f"stopped while {t.phase.value}: {why}"
                )
        if undo_failed:
            self.run_state.state = RunOutcome.ROLLBACK_FAILED
        else:
            self.run_state.state = (
                RunOutcome.ABORTED if self.run_state.abort is not None else RunOutcome.ROLLED_BACK
            )
        return self.run_state.state

    async def _undo_all(self) -> bool:
        """Undo every task that changed something, newest first; True if an undo failed."""
        undo_failed = False
        for task_id in reversed(self.run_state.order):
            state = self.run_state.tasks[task_id]
            if state.undo is None:
                continue
            token = CURRENT_STEP.set(f"{task_id}: undo")
            try:
                await self.executor.undo(task_id, state.undo)
            except (ActivityError, ChildWorkflowError, TaskFailed) as exc:
                # One undo the fleet refuses must not stop the others: say so and go on.
                reason = exc.reason if isinstance(exc, TaskFailed) else failure_reason(exc)
                self.run_state.event(f"{task_id}: undo failed, left for an operator: {reason}")
                self.run_state.set(task_id, TaskPhase.FAILED, f"undo failed: {reason}")
                undo_failed = True
                continue
            finally:
                CURRENT_STEP.reset(token)
            self.run_state.set(task_id, TaskPhase.ROLLED_BACK, state.message)
        return undo_failed
