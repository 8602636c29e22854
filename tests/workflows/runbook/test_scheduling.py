"""How RunbookWorkflow schedules tasks and lets operators past a failed condition.

On Temporal's clock (``clock_stack``): the delays and condition polls take no real time.
"""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import OperatorInput, RunbookStatus, TaskControlInput, TaskPhase
from tests.workflows.conftest import Stack
from tests.workflows.runbook.conftest import runbook, start, wait_phase
from workflows.runbook import RunbookWorkflow

PARALLEL = """
name: parallel
kind: drill
tasks:
  - {id: a, template: delay, args: {duration: 1}}
  - {id: b, template: delay, args: {duration: 1}}
  - {id: c, template: delay, depends_on: [a, b], args: {duration: 0.2}}
  - {id: d, template: delay, weak_depends_on: [c], args: {duration: 0.1}}
"""

GUARDED = """
name: guarded
kind: drill
tasks:
  - id: needs-impossible-health
    template: delay
    args: {duration: 0.1}
    pre_conditions: ["p99_ms in all < 0.001"]
    timeout: 120
  - id: stepped
    template: delay
    depends_on: [needs-impossible-health]
    args: {duration: 0.1}
"""


@pytest.fixture
def stack(clock_stack: Stack) -> Stack:
    return clock_stack


async def until_overridden(stack: Stack, handle: WorkflowHandle, task: str) -> RunbookStatus:
    for _ in range(150):
        status: RunbookStatus = await handle.query(RunbookWorkflow.status)
        if next(t for t in status.tasks if t.id == task).overrides:
            return status
        await stack.sleep(0.2)
    raise AssertionError(status.events)


class TestParallelScheduling:
    """Independent tasks run at the same time; a task starts only after every strong and
    weak dependency has ended."""

    async def test_independent_tasks_overlap(self, stack: Stack) -> None:
        report = await runbook_result(await start(stack, runbook(PARALLEL)))
        assert report.outcome == "completed"
        t = {s.id: s for s in report.tasks}
        assert all(s.started_at and s.finished_at for s in t.values())
        assert t["a"].started_at < t["b"].finished_at
        assert t["b"].started_at < t["a"].finished_at
        assert t["c"].started_at >= max(t["a"].finished_at, t["b"].finished_at)
        assert t["d"].started_at >= t["c"].finished_at
        assert report.critical_path[-2:] == ["c", "d"]
        assert report.sequential_s > report.critical_path_s


class TestOverrideAndPause:
    """An operator override lets a task past a failed pre-condition once, recorded with
    who and why; an override without a reason is refused; a paused run starts nothing."""

    async def test_override_a_failed_condition(self, stack: Stack) -> None:
        handle = await start(stack, runbook(GUARDED))
        await wait_phase(handle, "needs-impossible-health", TaskPhase.BLOCKED, sleep=stack.sleep)
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(
                RunbookWorkflow.override,
                TaskControlInput(task="needs-impossible-health", by="dave"),
            )
        await handle.execute_update(RunbookWorkflow.pause, OperatorInput(by="dave"))
        await handle.execute_update(
            RunbookWorkflow.override,
            TaskControlInput(task="needs-impossible-health", by="dave", reason="p99 probe broken"),
        )
        # The override is taken at the next poll of the condition; the pause set before it
        # then holds the task at its first step.
        status = await until_overridden(stack, handle, "needs-impossible-health")
        assert status.state == "paused"
        phases = {t.id: t.phase for t in status.tasks}
        assert phases["needs-impossible-health"] not in (TaskPhase.RUNNING, TaskPhase.DONE)
        assert phases["stepped"] == TaskPhase.PENDING
        await handle.execute_update(RunbookWorkflow.resume, OperatorInput(by="dave"))
        report = await runbook_result(handle)
        assert report.outcome == "completed"
        guarded = next(t for t in report.tasks if t.id == "needs-impossible-health")
        assert guarded.overrides and guarded.overrides[0].startswith("dave: p99 probe broken")
        assert any("overridden by dave" in e for e in report.events)
