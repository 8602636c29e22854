"""How a RunbookWorkflow run ends: its outcome, and the rollback when it does not complete.

A run completes only when every task is done or skipped with a reason. An abort, or a
task whose ``on_failure`` is ``rollback``, undoes every task that changed something,
newest first; an undo the fleet refuses is reported (``rollback_failed``) and the other
undos still run.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import (
        RunOutcome,
        SkipReason,
        TaskPhase,
        unfinished,
        why_not_completed,
    )
    from workflows.runbook_executor import TaskFailed, TemplateExecutor
    from workflows.runbook_legacy import finish_unpatched
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import CURRENT_STEP, failure_reason

__all__ = ["finish", "undo_all"]


async def finish(run: RunState, executor: TemplateExecutor) -> str:
    """The run's outcome, once no task runs any more; rolls back first when it must."""
    if not run.truthful:
        return await finish_unpatched(run, executor)
    if run.abort is None and run.rollback_reason is None:
        # The invariant: completed means every task done, or skipped with a reason.
        for t in unfinished(list(run.tasks.values())):
            run.set(t.id, TaskPhase.FAILED, f"left {t.phase.value} when the run ended")
        problems = why_not_completed(list(run.tasks.values()))
        if problems:
            run.why = "; ".join(problems)
            run.event(f"not completed: {run.why}")
            run.state = RunOutcome.FAILED
        else:
            run.state = RunOutcome.COMPLETED
        return run.state
    run.state = "rolling_back"
    why = run.rollback_reason or f"aborted by {run.abort.by if run.abort else 'an operator'}"
    run.why = why
    run.event(f"rolling back: {why}")
    undo_failed = await undo_all(run, executor)
    for t in unfinished(list(run.tasks.values())):
        if t.phase == TaskPhase.PENDING:
            run.skip(t.id, SkipReason.RUN_ENDED, f"not started: {why}")
        elif t.phase == TaskPhase.BLOCKED and t.id in run.paused_on_failure:
            run.set(t.id, TaskPhase.FAILED, t.message)
        else:
            run.set(t.id, TaskPhase.CANCELLED, f"stopped while {t.phase.value}: {why}")
    if undo_failed:
        run.state = RunOutcome.ROLLBACK_FAILED
    else:
        run.state = RunOutcome.ABORTED if run.abort is not None else RunOutcome.ROLLED_BACK
    return run.state


async def undo_all(run: RunState, executor: TemplateExecutor) -> bool:
    """Undo every task that changed something, newest first; True if an undo failed."""
    undo_failed = False
    for task_id in reversed(run.order):
        state = run.tasks[task_id]
        if state.undo is None:
            continue
        token = CURRENT_STEP.set(f"{task_id}: undo")
        try:
            await executor.undo(task_id, state.undo)
        except (ActivityError, ChildWorkflowError, TaskFailed) as exc:
            # One undo the fleet refuses must not stop the others: say so and go on.
            reason = exc.reason if isinstance(exc, TaskFailed) else failure_reason(exc)
            run.event(f"{task_id}: undo failed, left for an operator: {reason}")
            run.set(task_id, TaskPhase.FAILED, f"undo failed: {reason}")
            undo_failed = True
            continue
        finally:
            CURRENT_STEP.reset(token)
        run.set(task_id, TaskPhase.ROLLED_BACK, state.message)
    return undo_failed
