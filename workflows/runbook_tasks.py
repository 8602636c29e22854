"""How one RunbookWorkflow task runs: its stages within its timeout, and what ends it.

A mixin of RunbookWorkflow. Pre-check, steps (each followed by its wait and gates),
post-check; the task's ``timeout`` bounds them all, and whatever the stage was doing when
it ran out (waiting, retrying, heartbeating, holding at a gate), the stage is stopped and
the timeout goes to the task's ``on_failure``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import (
        TERMINAL,
        RunbookRunInput,
        SkipReason,
        TaskPhase,
        TaskState,
    )
    from orchestrator.runbook.spec import Task
    from orchestrator.runbook.templates import REGISTRY
    from workflows import observe
    from workflows.runbook_executor import TaskFailed, TemplateExecutor
    from workflows.runbook_legacy import RunbookLegacy
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import CURRENT_STEP, NothingToDo, failure_reason

__all__ = ["RunbookTasks"]


class RunbookTasks(RunbookLegacy):
    """Running one task, over the run state that RunbookWorkflow keeps."""

    run_state: RunState
    inp: RunbookRunInput
    executor: TemplateExecutor
    _on_failure: Callable[[Task, TaskState, str], Awaitable[None]]
    _conditions: Callable[..., Awaitable[None]]
    _gate: Callable[[Task, TaskState, int, float], Awaitable[None]]

    @property
    def _metric_region(self) -> str:
        return str(self.inp.parameters.get("region", ""))

    async def _run_task(self, task: Task) -> None:
        state = self.run_state.tasks[task.id]
        state.started_at = workflow.now()
        observe.task_running(
            self.inp.runbook.name,
            self._metric_region,
            task.id,
            state.started_at.timestamp(),
            state.expected_s,
        )
        watchdog = asyncio.create_task(self._watch(state))
        if not self.run_state.truthful:
            await self._run_task_unpatched(task, state, watchdog)
            return
        try:
            failure = await self._stages_within_timeout(task, state)
        except asyncio.CancelledError:
            watchdog.cancel()  # an abort or another task's rollback: _finish closes it out
            raise
        if failure is not None:
            await self._on_failure(task, state, failure)
        elif state.phase not in TERMINAL:
            self.run_state.set(task.id, TaskPhase.DONE, "")
        self._task_ended(state, watchdog)

    async def _stages_within_timeout(self, task: Task, state: TaskState) -> str | None:
        """Run the task's stages; why it failed, or None.

        Not asyncio.wait_for: on its timeout it re-raises whatever the cancelled stage
        raised, and a cancelled activity comes back as an ActivityError that looks like an
        operator's abort, so a timed-out task was left "running" for ever. Here the timeout
        is the reason whatever the stage was doing, and the stage is stopped (its activity
        acknowledging the cancel) before on_failure runs.
        """
        timeout = task.timeout if isinstance(task.timeout, float) else None
        stages = asyncio.create_task(self._stages(task, state))

        async def stop() -> None:
            stages.cancel()
            await asyncio.gather(stages, return_exceptions=True)

        try:
            done, _ = await workflow.wait([stages], timeout=timeout)
        except asyncio.CancelledError:
            await stop()
            raise
        except Exception as exc:  # a timer Temporal cannot set: the task fails, not the run
            await stop()
            return f"{type(exc).__name__}: {exc}"
        if not done:
            await stop()
            return f"timed out after {timeout:g}s ({state.phase.value}: {state.message})"
        try:
            stages.result()
        except NothingToDo as nothing:
            self.run_state.skip(task.id, SkipReason.NOTHING_TO_DO, nothing.reason)
        except TaskFailed as failed:
            return failed.reason
        except (ActivityError, ChildWorkflowError) as exc:
            return failure_reason(exc)
        except workflow.NondeterminismError:
            raise
        except Exception as exc:
            # Anything else a stage raises (a template this worker does not know, a value
            # Temporal refuses) fails the task into its on_failure; left to escape, the
            # task stayed pending and the run "completed" around it.
            return f"{type(exc).__name__}: {exc}"
        return None

    def _task_ended(self, state: TaskState, watchdog: asyncio.Task[None]) -> None:
        watchdog.cancel()
        state.finished_at = workflow.now()
        observe.task_stopped(self.inp.runbook.name, self._metric_region, state.id)
        self.run_state.changed = True

    async def _stages(self, task: Task, state: TaskState) -> None:
        # Each _run_task is its own asyncio task with its own copy of the context.
        CURRENT_STEP.set(f"{task.id}: pre-check")
        self.run_state.set(task.id, TaskPhase.PRE_CHECK, "")
        await self._conditions(task, state, task.pre_conditions, "pre-condition")
        template = REGISTRY[task.template]
        args = template.validate_args(task.args)
        points = task.steps.progress() if template.stepped and task.steps else [1.0]
        state.steps = len(points)
        for step, point in enumerate(points, start=1):
            await workflow.wait_condition(
                lambda: self.run_state.paused_by is None or task.id in self.run_state.skips
            )
            if task.id in self.run_state.skips:
                self.run_state.set(
                    task.id, TaskPhase.SKIPPED, f"skipped by {self.run_state.skips[task.id].by}"
                )
                return
            CURRENT_STEP.set(f"{task.id}: step {step}/{len(points)}")
            self.run_state.set(task.id, TaskPhase.RUNNING, f"step {step}/{len(points)}")
            await self.executor.apply(task, args, state, point, step)
            state.step = step
            wait = float(task.wait) if isinstance(task.wait, float) else 0.0
            if task.gates or step < len(points):
                await workflow.sleep(wait)
            if task.gates:
                await self._gate(task, state, step, wait)
        CURRENT_STEP.set(f"{task.id}: post-check")
        self.run_state.set(task.id, TaskPhase.POST_CHECK, "")
        await self._conditions(task, state, task.post_conditions, "post-condition")

    async def _watch(self, state: TaskState) -> None:
        if state.expected_s is None:
            return
        await workflow.sleep(state.expected_s)
        if state.phase not in TERMINAL:
            state.stuck = True
            self.run_state.event(
                f"{state.id}: stuck, running past p75 of earlier runs ({state.expected_s:.0f}s)"
            )
