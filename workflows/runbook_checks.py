"""The health-reading stages of a RunbookWorkflow task: conditions and gates.

A condition that fails blocks its task and is reread until it holds, an operator
overrides it or the task's timeout passes; a gate that fails holds its task at the
step up to ``gate_holds`` times before the failure counts.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import (
        TaskPhase,
        TaskState,
        record_gate,
    )
    from orchestrator.runbook.spec import Task
    from workflows import observe
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import TaskFailed, check

__all__ = ["DEFAULT_CONDITION_TIMEOUT", "POLL", "Checks"]

#: how often a blocked condition is re-read
POLL = timedelta(seconds=5)
DEFAULT_CONDITION_TIMEOUT = 600.0


class Checks:
    """Conditions and gates of the tasks of one run, recorded in its state."""

    def __init__(self, run: RunState) -> None:
        self.run = run

    async def gate(self, task: Task, state: TaskState, step: int, wait: float) -> None:
        """Read the gates; while they fail and holds are left, hold at this step and reread."""
        for held in range(task.gate_holds + 1):
            result = await check(task.gates)
            passed = result.ok or self.overridden(task.id, state, result.message)
            # Kept from the activity's result, for the report's gate chart: no new command.
            record_gate(
                state.gates,
                at=workflow.now(),
                step=step,
                results=result.results,
                regions=result.regions,
                held=not passed and held < task.gate_holds,
            )
            if passed:
                if held:
                    self.run.set(
                        task.id, TaskPhase.RUNNING, f"step {step}: gates pass after {held} holds"
                    )
                return
            if held == task.gate_holds:
                break
            why = f"gate failed after step {step}: {result.message}"
            self.run.set(
                task.id, TaskPhase.BLOCKED, f"holding ({held + 1}/{task.gate_holds}): {why}"
            )
            self.run.event(
                f"{task.id}: holding at step {step} ({held + 1}/{task.gate_holds}): {why}"
            )
            observe.gate_hold(self.run.runbook.name, task.id)
            await workflow.sleep(wait or POLL.total_seconds())
        suffix = f" (held {task.gate_holds} times)" if task.gate_holds else ""
        raise TaskFailed(f"gate failed after step {step}: {result.message}{suffix}")

    async def conditions(self, task: Task, state: TaskState, preds: list, label: str) -> None:
        if not preds:
            return
        limit = task.timeout if isinstance(task.timeout, float) else DEFAULT_CONDITION_TIMEOUT
        deadline = workflow.now() + timedelta(seconds=limit)
        while True:
            result = await check(preds)
            if result.ok or self.overridden(task.id, state, result.message):
                return
            self.run.set(task.id, TaskPhase.BLOCKED, f"{label} unmet: {result.message}")
            if workflow.now() >= deadline:
                raise TaskFailed(f"{label} unmet: {result.message}")
            await workflow.sleep(POLL)

    def overridden(self, task_id: str, state: TaskState, message: str) -> bool:
        override = self.run.overrides.pop(task_id, None)
        if override is None:
            return False
        state.overrides.append(f"{override.by}: {override.reason} (was: {message})")
        self.run.event(f"{task_id}: condition overridden by {override.by}: {override.reason}")
        return True
