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
    from orchestrator.contracts.runbook import (
        OperatorInput,
        RunOutcome,
        SkipReason,
        TaskControlInput,
        TaskPhase,
        TaskState,
        unfinished,
        why_not_completed,
    )
    from orchestrator.runbook.spec import Task
    from workflows.runbook_executor import TaskFailed, TemplateExecutor
    from workflows.runbook_legacy import RunbookLegacy
    from workflows.runbook_steps import CURRENT_STEP, failure_reason

__all__ = ["RunbookFailures"]


class RunbookFailures(RunbookLegacy):
    """on_failure and rollback over the run state that RunbookWorkflow keeps."""

    tasks: dict[str, TaskState]
    order: list[str]
    executor: TemplateExecutor
    state: str
    paused_by: str | None
    abort: OperatorInput | None
    rollback_reason: str | None
    skips: dict[str, TaskControlInput]
    #: runs started after TRUTH_PATCH (see workflows/runbook_steps.py)
    truthful: bool
    #: why a run that did not complete ended as it did
    why: str
    #: tasks blocked by ``on_failure: pause`` (failed, waiting for an operator)
    paused_on_failure: set[str]
    _set: Callable[[str, TaskPhase, str], None]
    _skip: Callable[[str, SkipReason, str], None]
    _event: Callable[[str], None]

    async def _on_failure(self, task: Task, state: TaskState, reason: str) -> None:
        self._event(f"{task.id}: {reason}")
        if task.on_failure == "continue" and self.truthful:
            self._skip(
                task.id,
                SkipReason.CONTINUED,
                f"failed, run went on (on_failure: continue): {reason}",
            )
        elif task.on_failure == "continue":
            self._set(task.id, TaskPhase.FAILED, reason)
        elif task.on_failure == "pause":
            self.paused_on_failure.add(task.id)
            self._set(task.id, TaskPhase.BLOCKED, f"paused on failure: {reason}")
            self.paused_by = f"failure of {task.id}"
            await workflow.wait_condition(lambda: task.id in self.skips or self.abort is not None)
            if task.id in self.skips:
                self._skip(
                    task.id,
                    SkipReason.OPERATOR,
                    f"skipped by {self.skips[task.id].by} after: {reason}",
                )
                # The skip answers the pause this failure made (an operator's own pause stays).
                if self.truthful and self.paused_by == f"failure of {task.id}":
                    self.paused_by = None
        else:
            self._set(task.id, TaskPhase.FAILED, reason)
            self.rollback_reason = f"{task.id}: {reason}"

    async def _finish(self) -> str:
        if not self.truthful:
            return await self._finish_unpatched()
        if self.abort is None and self.rollback_reason is None:
            # The invariant: completed means every task done, or skipped with a reason.
            for t in unfinished(list(self.tasks.values())):
                self._set(t.id, TaskPhase.FAILED, f"left {t.phase.value} when the run ended")
            problems = why_not_completed(list(self.tasks.values()))
            if problems:
                self.why = "; ".join(problems)
                self._event(f"not completed: {self.why}")
                self.state = RunOutcome.FAILED
            else:
                self.state = RunOutcome.COMPLETED
            return self.state
        self.state = "rolling_back"
        why = self.rollback_reason or f"aborted by {self.abort.by if self.abort else 'an operator'}"
        self.why = why
        self._event(f"rolling back: {why}")
        undo_failed = await self._undo_all()
        for t in unfinished(list(self.tasks.values())):
            if t.phase == TaskPhase.PENDING:
                self._skip(t.id, SkipReason.RUN_ENDED, f"not started: {why}")
            elif t.phase == TaskPhase.BLOCKED and t.id in self.paused_on_failure:
                self._set(t.id, TaskPhase.FAILED, t.message)
            else:
                self._set(t.id, TaskPhase.CANCELLED, f"stopped while {t.phase.value}: {why}")
        if undo_failed:
            self.state = RunOutcome.ROLLBACK_FAILED
        else:
            self.state = RunOutcome.ABORTED if self.abort is not None else RunOutcome.ROLLED_BACK
        return self.state

    async def _undo_all(self) -> bool:
        """Undo every task that changed something, newest first; True if an undo failed."""
        undo_failed = False
        for task_id in reversed(self.order):
            state = self.tasks[task_id]
            if state.undo is None:
                continue
            token = CURRENT_STEP.set(f"{task_id}: undo")
            try:
                await self.executor.undo(task_id, state.undo)
            except (ActivityError, ChildWorkflowError, TaskFailed) as exc:
                # One undo the fleet refuses must not stop the others: say so and go on.
                reason = exc.reason if isinstance(exc, TaskFailed) else failure_reason(exc)
                self._event(f"{task_id}: undo failed, left for an operator: {reason}")
                self._set(task_id, TaskPhase.FAILED, f"undo failed: {reason}")
                undo_failed = True
                continue
            finally:
                CURRENT_STEP.reset(token)
            self._set(task_id, TaskPhase.ROLLED_BACK, state.message)
        return undo_failed
