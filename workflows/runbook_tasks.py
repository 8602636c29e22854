"""How one RunbookWorkflow task runs: its stages within its timeout, and what ends it.

Pre-check, steps (each followed by its wait and gates), post-check; the task's
``timeout`` bounds them all, and whatever the stage was doing when it ran out (waiting,
retrying, heartbeating, holding at a gate), the stage is stopped and the timeout goes to
the task's ``on_failure``: continue, pause for an operator, or roll the run back.
"""

from __future__ import annotations

import asyncio

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
    from workflows.runbook_checks import Checks
    from workflows.runbook_executor import TaskFailed, TemplateExecutor
    from workflows.runbook_legacy import run_task_unpatched
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import CURRENT_STEP, NothingToDo, failure_reason

__all__ = ["TaskRunner"]


class TaskRunner:
    """Runs the tasks of one run, each as its own asyncio task, over the run's state."""

    def __init__(self, run: RunState, inp: RunbookRunInput, executor: TemplateExecutor) -> None:
        self.run = run
        self.executor = executor
        self.checks = Checks(run)
        self.metric_region = str(inp.parameters.get("region", ""))

    async def run_task(self, task: Task) -> None:
        state = self.run.tasks[task.id]
        state.started_at = workflow.now()
        observe.task_running(
            self.run.runbook.name,
            self.metric_region,
            task.id,
            state.started_at.timestamp(),
            state.expected_s,
        )
        watchdog = asyncio.create_task(self._watch(state))
        if not self.run.truthful:
            await run_task_unpatched(self, task, state, watchdog)
            return
        try:
            failure = await self._stages_within_timeout(task, state)
        except asyncio.CancelledError:
            watchdog.cancel()  # an abort or another task's rollback: finish() closes it out
            raise
        if failure is not None:
            await self.on_failure(task, state, failure)
        elif state.phase not in TERMINAL:
            self.run.set(task.id, TaskPhase.DONE, "")
        self.task_ended(state, watchdog)

    async def _stages_within_timeout(self, task: Task, state: TaskState) -> str | None:
        """Run the task's stages; why it failed, or None.

        Not asyncio.wait_for: on its timeout it re-raises whatever the cancelled stage
        raised, and a cancelled activity comes back as an ActivityError that looks like an
        operator's abort, so a timed-out task was left "running" for ever. Here the timeout
        is the reason whatever the stage was doing, and the stage is stopped (its activity
        acknowledging the cancel) before on_failure runs.
        """
        timeout = task.timeout if isinstance(task.timeout, float) else None
        stages = asyncio.create_task(self.stages(task, state))

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
            self.run.skip(task.id, SkipReason.NOTHING_TO_DO, nothing.reason)
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

    def task_ended(self, state: TaskState, watchdog: asyncio.Task[None]) -> None:
        watchdog.cancel()
        state.finished_at = workflow.now()
        observe.task_stopped(self.run.runbook.name, self.metric_region, state.id)
        self.run.changed = True

    async def stages(self, task: Task, state: TaskState) -> None:
        # Each run_task is its own asyncio task with its own copy of the context.
        CURRENT_STEP.set(f"{task.id}: pre-check")
        self.run.set(task.id, TaskPhase.PRE_CHECK, "")
        await self.checks.conditions(task, state, task.pre_conditions, "pre-condition")
        template = REGISTRY[task.template]
        args = template.validate_args(task.args)
        points = task.steps.progress() if template.stepped and task.steps else [1.0]
        state.steps = len(points)
        for step, point in enumerate(points, start=1):
            await workflow.wait_condition(
                lambda: self.run.paused_by is None or task.id in self.run.skips
            )
            if task.id in self.run.skips:
                self.run.set(task.id, TaskPhase.SKIPPED, f"skipped by {self.run.skips[task.id].by}")
                return
            CURRENT_STEP.set(f"{task.id}: step {step}/{len(points)}")
            self.run.set(task.id, TaskPhase.RUNNING, f"step {step}/{len(points)}")
            await self.executor.apply(task, args, state, point, step)
            state.step = step
            wait = float(task.wait) if isinstance(task.wait, float) else 0.0
            if task.gates or step < len(points):
                await workflow.sleep(wait)
            if task.gates:
                await self.checks.gate(task, state, step, wait)
        CURRENT_STEP.set(f"{task.id}: post-check")
        self.run.set(task.id, TaskPhase.POST_CHECK, "")
        await self.checks.conditions(task, state, task.post_conditions, "post-condition")

    async def _watch(self, state: TaskState) -> None:
        if state.expected_s is None:
            return
        await workflow.sleep(state.expected_s)
        if state.phase not in TERMINAL:
            state.stuck = True
            self.run.event(
                f"{state.id}: stuck, running past p75 of earlier runs ({state.expected_s:.0f}s)"
            )

    async def on_failure(self, task: Task, state: TaskState, reason: str) -> None:
        """Continue, pause for an operator or roll the run back, as the task says."""
        self.run.event(f"{task.id}: {reason}")
        if task.on_failure == "continue" and self.run.truthful:
            self.run.skip(
                task.id,
                SkipReason.CONTINUED,
                f"failed, run went on (on_failure: continue): {reason}",
            )
        elif task.on_failure == "continue":
            self.run.set(task.id, TaskPhase.FAILED, reason)
        elif task.on_failure == "pause":
            self.run.paused_on_failure.add(task.id)
            self.run.set(task.id, TaskPhase.BLOCKED, f"paused on failure: {reason}")
            self.run.paused_by = f"failure of {task.id}"
            await workflow.wait_condition(
                lambda: task.id in self.run.skips or self.run.abort is not None
            )
            if task.id in self.run.skips:
                self.run.skip(
                    task.id,
                    SkipReason.OPERATOR,
                    f"skipped by {self.run.skips[task.id].by} after: {reason}",
                )
                # The skip answers the pause this failure made (an operator's own pause stays).
                if self.run.truthful and self.run.paused_by == f"failure of {task.id}":
                    self.run.paused_by = None
        else:
            self.run.set(task.id, TaskPhase.FAILED, reason)
            self.run.rollback_reason = f"{task.id}: {reason}"
