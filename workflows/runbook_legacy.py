"""How RunbookWorkflow ran a task and ended a run before TRUTH_PATCH.

Kept, unchanged, only so that runs started by earlier workers replay exactly as they
ran (``workflow.patched`` answers False for their histories). Their flaws are why the
patch exists: a timed-out task could be left "running" and the run end "completed".
New runs never take these paths.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import TERMINAL, TaskPhase, TaskState
    from orchestrator.runbook.spec import Task
    from workflows.runbook_executor import TaskFailed, TemplateExecutor
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import ACTIVITY_FAILURE_PATCH, failure_reason

__all__ = ["RunbookLegacy"]


class RunbookLegacy:
    """The pre-TRUTH_PATCH task runner and ending, over RunbookWorkflow's state."""

    run_state: RunState
    executor: TemplateExecutor
    _stages: Callable[[Task, TaskState], Awaitable[None]]
    _on_failure: Callable[[Task, TaskState, str], Awaitable[None]]
    _task_ended: Callable[[TaskState, asyncio.Task[None]], None]

    async def _run_task_unpatched(
        self, task: Task, state: TaskState, watchdog: asyncio.Task[None]
    ) -> None:
        """How runs started before TRUTH_PATCH ran a task; their histories replay this."""
        try:
            timeout = task.timeout if isinstance(task.timeout, float) else None
            await asyncio.wait_for(self._stages(task, state), timeout=timeout)
            if state.phase not in TERMINAL:
                self.run_state.set(task.id, TaskPhase.DONE, "")
        except TaskFailed as failed:
            await self._on_failure(task, state, failed.reason)
        except TimeoutError:
            await self._on_failure(task, state, f"timed out after {task.timeout}s")
        except (ActivityError, ChildWorkflowError) as exc:
            if is_cancelled_exception(exc) or not workflow.patched(ACTIVITY_FAILURE_PATCH):
                self._task_ended(state, watchdog)
                raise
            await self._on_failure(task, state, failure_reason(exc))
        except GeneratorExit:
            # The worker evicted this run (shutdown, cache pressure): there is no workflow
            # event loop to record into, and a replay rebuilds the state anyway.
            raise
        except BaseException:
            self._task_ended(state, watchdog)
            raise
        self._task_ended(state, watchdog)

    async def _finish_unpatched(self) -> str:
        """How runs started before TRUTH_PATCH ended; their histories replay this."""
        if self.run_state.abort is None and self.run_state.rollback_reason is None:
            failed = [t.id for t in self.run_state.tasks.values() if t.phase == TaskPhase.FAILED]
            self.run_state.state = "failed" if failed else "completed"
            return self.run_state.state
        self.run_state.state = "rolling_back"
        why = (
            self.run_state.rollback_reason
            or f"aborted by {self.run_state.abort.by if self.run_state.abort else 'an operator'}"
        )
        self.run_state.event(f"rolling back: {why}")
        undo_failed = False
        for task_id in reversed(self.run_state.order):
            state = self.run_state.tasks[task_id]
            if state.undo is None:
                continue
            try:
                await self.executor.undo(task_id, state.undo)
            except (ActivityError, ChildWorkflowError, TaskFailed) as exc:
                if not workflow.patched(ACTIVITY_FAILURE_PATCH):
                    raise
                reason = exc.reason if isinstance(exc, TaskFailed) else failure_reason(exc)
                self.run_state.event(f"{task_id}: undo failed, left for an operator: {reason}")
                self.run_state.set(task_id, TaskPhase.FAILED, f"undo failed: {reason}")
                undo_failed = True
                continue
            self.run_state.set(task_id, TaskPhase.ROLLED_BACK, state.message)
        if undo_failed:
            self.run_state.state = "rollback_failed"
        else:
            self.run_state.state = "aborted" if self.run_state.abort is not None else "rolled_back"
        return self.run_state.state
