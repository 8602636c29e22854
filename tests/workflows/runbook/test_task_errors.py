"""An exception in a task's own code fails that task with its reason; it never vanishes
from a task no one awaits, and the run never ends "completed" around it."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import yaml
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.runbook import RunbookActivities
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import RunbookReport, RunbookRunInput, TaskPhase
from orchestrator.runbook.spec import Runbook
from tests.fixtures.temporal import new_worker
from workflows.runbook import RunbookWorkflow

# Lint refuses the unknown template; started as a client that skipped lint would.
UNKNOWN = """
name: unknown-template
kind: recovery
tasks:
  - {id: a, template: nope}
  - {id: b, template: delay, args: {duration: 1}, depends_on: [a]}
"""


class TestTaskErrors:
    """A task whose code raises fails with the exception as its reason, and its on_failure
    (rollback) applies."""

    async def test_unknown_template_fails_the_task(
        self, dev_env: WorkflowEnvironment, tmp_path: Path
    ) -> None:
        rb = Runbook.model_validate(yaml.safe_load(UNKNOWN))
        activities = RunbookActivities(cast(Any, None), tmp_path)
        worker = new_worker(dev_env.client, [activities.durations], [RunbookWorkflow])
        async with worker:
            handle = await dev_env.client.start_workflow(
                RunbookWorkflow.run,
                RunbookRunInput(runbook=rb, requested_by="test"),
                id=f"unknown-{uuid.uuid4().hex[:6]}",
                task_queue=worker.task_queue,
                result_type=RunbookReport,
            )
            report = await runbook_result(handle)
        assert report.outcome == "rolled_back"
        a = next(t for t in report.tasks if t.id == "a")
        assert a.phase == TaskPhase.FAILED and "unknown template 'nope'" in a.message
