"""Templates that run child workflows: a nested runbook, and a live load test."""

from __future__ import annotations

import yaml
from temporalio.client import WorkflowHandle

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.load_test import LoadTestResult
from orchestrator.contracts.runbook import OperatorInput, RunbookReport, TaskPhase, TaskState
from orchestrator.runbook.spec import Runbook
from tests.workflows.conftest import Stack
from tests.workflows.runbook.conftest import close, runbook, start, wait_phase
from workflows.runbook import RunbookWorkflow

PARENT = """
name: parent
kind: drill
parameters:
  region: {type: region}
tasks:
  - id: inner
    template: runbook
    args: {runbook: sessions-off, parameters: {region: "${params.region}"}}
  - id: hold
    template: approval
    depends_on: [inner]
    args: {approvers: [alice], timeout: 60}
"""

CHILD = """
name: sessions-off
kind: drain
restore_runbook: sessions-on
parameters:
  region: {type: region}
tasks:
  - id: sessions-down
    template: service_weight
    args: {region: "${params.region}", service: sessions, weight: 0}
    restore: auto
"""

CHILD_RESTORE = """
name: sessions-on
kind: restore
parameters:
  region: {type: region}
tasks:
  - id: sessions-up
    template: service_weight
    args: {region: "${params.region}", service: sessions, weight: 1}
"""

LOAD = """
name: probe-capacity
kind: drill
tasks:
  - id: probe
    template: load_test
    args:
      region: eu-west
      metrics: [p99_ms, error_rate, utilization]
      window_s: 0.5
      settle_s: 0
      max_steps: 4
"""


def nested() -> dict[str, Runbook]:
    """Unbound, as ``nested_runbooks`` gives them: the task binds its parameters."""
    return {
        "sessions-off": Runbook.model_validate(yaml.safe_load(CHILD)),
        "sessions-on": Runbook.model_validate(yaml.safe_load(CHILD_RESTORE)),
    }


def state(status: RunbookReport, task: str) -> TaskState:
    return next(t for t in status.tasks if t.id == task)


class TestNestedRunbook:
    """A ``runbook`` task runs the nested runbook as a child RunbookWorkflow; a rollback
    of the parent runs the nested runbook's restore runbook."""

    async def test_child_runs_and_rollback_restores(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        before = (await stack.fleet.topology()).service_weights.get("eu-west/sessions", 1.0)
        handle = await start(stack, runbook(PARENT, region="eu-west"), nested=nested())
        await wait_phase(handle, "hold", TaskPhase.RUNNING)
        child: WorkflowHandle = stack.client.get_workflow_handle(
            f"{handle.id}/inner", result_type=RunbookReport
        )
        report = await runbook_result(child)
        assert report.outcome == "completed" and report.runbook == "sessions-off"
        assert (await stack.fleet.topology()).service_weights["eu-west/sessions"] == 0.0

        await handle.execute_update(
            RunbookWorkflow.abort_run, OperatorInput(by="bob", reason="test")
        )
        parent = await runbook_result(handle)
        assert parent.outcome == "aborted"
        assert state(parent, "inner").phase == TaskPhase.ROLLED_BACK
        restore: WorkflowHandle = stack.client.get_workflow_handle(
            f"{handle.id}/inner/restore", result_type=RunbookReport
        )
        assert (await runbook_result(restore)).runbook == "sessions-on"
        weights = (await stack.fleet.topology()).service_weights
        assert weights.get("eu-west/sessions", 1.0) == before

    async def test_missing_nested_runbook_fails_the_task(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        handle = await start(stack, runbook(PARENT, region="eu-west"))
        report = await runbook_result(handle)
        assert report.outcome == "rolled_back"
        inner = state(report, "inner")
        assert inner.phase == TaskPhase.FAILED
        assert "sessions-off" in inner.message and "not given at start" in inner.message


class TestLoadTestTask:
    """A ``load_test`` task runs LiveLoadTestWorkflow as a child and reports its finding;
    the routing found before the test is back afterwards."""

    async def test_load_test_child(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        handle = await start(stack, runbook(LOAD))
        report = await runbook_result(handle)
        probe = state(report, "probe")
        assert report.outcome == "completed", probe.message
        assert probe.phase == TaskPhase.DONE and "rps" in probe.message
        child: WorkflowHandle = stack.client.get_workflow_handle(
            f"{handle.id}/probe", result_type=LoadTestResult
        )
        result = await child.result()
        assert result.region == "eu-west" and result.steps >= 1
        assert result.routing_restored
        assert result.outcome in probe.message
        assert close((await stack.fleet.routing()).fractions, balanced)
