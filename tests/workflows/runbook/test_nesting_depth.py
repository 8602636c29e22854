"""A nested run deeper than MAX_NESTING_DEPTH fails its task instead of starting, whatever
runbooks the run was given. On the dev server: RunbookWorkflow sets search attributes,
which the time-skipping server does not have."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import yaml
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.runbook import RunbookActivities
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import RunbookReport, RunbookRunInput, TaskPhase
from orchestrator.runbook.spec import MAX_NESTING_DEPTH, Runbook
from tests.fixtures.temporal import new_worker
from workflows.runbook import RunbookWorkflow

# Runs itself: lint refuses this, so the run is started as a client that skipped lint would.
LOOP = """
name: loop
kind: recovery
tasks:
  - id: again
    template: runbook
    args: {runbook: loop}
"""


class TestNestingDepthAtRunTime:
    """A runbook that runs itself stops at the depth limit: the deepest run's task fails
    naming the limit, and every run above it ends instead of nesting for ever."""

    async def test_self_nesting_run_stops_at_the_limit(
        self, dev_env: WorkflowEnvironment, tmp_path: Path
    ) -> None:
        loop = Runbook.model_validate(yaml.safe_load(LOOP))
        activities = RunbookActivities(cast(Any, None), tmp_path)
        worker = new_worker(dev_env.client, [activities.durations], [RunbookWorkflow])
        root_id = f"loop-{uuid.uuid4().hex[:6]}"
        async with worker:
            handle = await dev_env.client.start_workflow(
                RunbookWorkflow.run,
                RunbookRunInput(runbook=loop, requested_by="test", nested={"loop": loop}),
                id=root_id,
                task_queue=worker.task_queue,
                result_type=RunbookReport,
            )
            report = await runbook_result(handle)
            deepest_id = root_id + "/again" * MAX_NESTING_DEPTH
            deepest: WorkflowHandle[Any, RunbookReport] = dev_env.client.get_workflow_handle(
                deepest_id, result_type=RunbookReport
            )
            bottom = await runbook_result(deepest)
        assert report.outcome == "rolled_back"
        assert bottom.outcome == "rolled_back"
        task = bottom.tasks[0]
        assert task.phase == TaskPhase.FAILED
        assert f"{MAX_NESTING_DEPTH + 1} levels deep" in task.message
        assert f"limit of {MAX_NESTING_DEPTH}" in task.message
