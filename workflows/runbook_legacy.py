"""How RunbookWorkflow ran a task and ended a run before TRUTH_PATCH.

Kept, doing what they did, only so that runs started by earlier workers replay exactly as they
ran (``workflow.patched`` answers False for their histories). Their flaws are why the
patch exists: a timed-out task could be left "running" and the run end "completed".
New runs never take these paths.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import TERMINAL, TaskPhase, TaskState
    from orchestrator.runbook.spec import Task
    from workflows.runbook_executor import TaskFailed, TemplateExecutor
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import ACTIVITY_FAILURE_PATCH, failure_reason

if TYPE_CHECKING:
    from workflows.runbook_tasks import TaskRunner

__all__ = ["finish_unpatched", "run_task_unpatched"]


async def run_task_unpatched(
    runner: TaskRunner, task: Task, state: TaskState, watchdog: asyncio.Task[None]
) -> None:
    """How runs started before TRUTH_PATCH ran a task; their histories replay this."""
    try:
        timeout = task.timeout if isinstance(task.timeout, float) else None
        await asyncio.wait_for(runner.stages(task, state), timeout=timeout)
        if state.phase not in TERMINAL:
            runner.run.set(task.id, TaskPhase.DONE, "")
    except TaskFailed as failed:
        await runner.on_failure(task, state, failed.reason)
    except TimeoutError:
        await runner.on_failure(task, state, f"timed out after {task.timeout}s")
    except (ActivityError, ChildWorkflowError) as exc:
        if is_cancelled_exception(exc) or not workflow.patched(ACTIVITY_FAILURE_PATCH):
            runner.task_ended(state, watchdog)
            raise
        await runner.on_failure(task, state, failure_reason(exc))
    except GeneratorExit:
        # The worker evicted this run (shutdown, cache pressure): there is no workflow
        # event loop to record into, and a replay rebuilds the state anyway.
        raise
    except BaseException:
        runner.task_ended(state, watchdog)
        raise
    runner.task_ended(state, watchdog)


async def finish_unpatched(run: RunState, executor: TemplateExecutor) -> str:
    """How runs started before TRUTH_PATCH ended; their histories replay this."""
    if run.abort is None and run.rollback_reason is None:
        failed = [t.id for t in run.tasks.values() if t.phase == TaskPhase.FAILED]
        run.state = "failed" if failed else "completed"
        return run.state
    run.state = "rolling_back"
    why = run.rollback_reason or f"aborted by {run.abort.by if run.abort else 'an operator'}"
    run.event(f"rolling back: {why}")
    undo_failed = False
    for task_id in reversed(run.order):
        state = run.tasks[task_id]
        if state.undo is None:
            continue
        try:
            await executor.undo(task_id, state.undo)
        except (ActivityError, ChildWorkflowError, TaskFailed) as exc:
            if not workflow.patched(ACTIVITY_FAILURE_PATCH):
                raise
            reason = exc.reason if isinstance(exc, TaskFailed) else failure_reason(exc)
            run.event(f"{task_id}: undo failed, left for an operator: {reason}")
            run.set(task_id, TaskPhase.FAILED, f"undo failed: {reason}")
            undo_failed = True
            continue
        run.set(task_id, TaskPhase.ROLLED_BACK, state.message)
    if undo_failed:
        run.state = "rollback_failed"
    else:
        run.state = "aborted" if run.abort is not None else "rolled_back"
    return run.state
