"""Approvals and drill-versus-real tasks of RunbookWorkflow, on the model lab.

Approvals are given the ways an operator can: the ``approve`` Update from a
client, and the same Update from the ``temporal`` CLI.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
import yaml
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import ApproveInput, RunbookRunInput, SkipReason, TaskPhase
from orchestrator.runbook.params import bind
from orchestrator.runbook.spec import Runbook, RunMode
from orchestrator.temporal import binary_path
from tests.workflows.conftest import Stack
from workflows.runbook import RunbookWorkflow

GATED = """
name: gated-{suffix}
kind: drain
parameters:
  region: {{type: region}}
tasks:
  - id: web-off
    template: service_weight
    args: {{region: "${{params.region}}", service: web, weight: 0}}
    restore: auto
  - id: sign-off
    template: approval
    depends_on: [web-off]
    on_failure: {on_failure}
    args: {{approvers: [alice, bob], timeout: {timeout}}}
"""
MODES = """
name: modes-{suffix}
kind: drain
tasks:
  - id: always
    template: delay
    args: {{duration: 0.1}}
  - id: drill-only
    template: delay
    when: drill
    args: {{duration: 0.1}}
  - id: real-only
    template: delay
    when: real
    args: {{duration: 0.1}}
"""


def runbook(text: str, **fmt: Any) -> Runbook:
    rb = Runbook.model_validate(yaml.safe_load(text.format(suffix=uuid.uuid4().hex[:6], **fmt)))
    return bind(rb, {"region": "eu-west"} if rb.parameters else {})


async def start(stack: Stack, rb: Runbook, mode: RunMode = "real") -> WorkflowHandle[Any, Any]:
    return await stack.client.start_workflow(
        RunbookWorkflow.run,
        RunbookRunInput(runbook=rb, mode=mode, requested_by="test"),
        id=f"{rb.name}-{uuid.uuid4().hex[:6]}",
        task_queue=stack.task_queue,
    )


async def waiting_for_approval(handle: WorkflowHandle[Any, Any]) -> None:
    for _ in range(150):
        status = await handle.query(RunbookWorkflow.status)
        sign_off = next(t for t in status.tasks if t.id == "sign-off")
        if sign_off.phase == TaskPhase.RUNNING and "waiting for approval" in sign_off.message:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"sign-off never waited for approval: {status}")


class TestApproval:
    """An approval waits for a listed approver, records who and when, and refuses others."""

    async def test_update_from_a_client(self, stack: Stack) -> None:
        handle = await start(stack, runbook(GATED, on_failure="rollback", timeout="10m"))
        await waiting_for_approval(handle)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                RunbookWorkflow.approve, ApproveInput(task="sign-off", by="mallory")
            )
        assert isinstance(refused.value.cause, ApplicationError)
        assert "mallory may not approve sign-off" in refused.value.cause.message
        with pytest.raises(WorkflowUpdateFailedError) as wrong_task:
            await handle.execute_update(
                RunbookWorkflow.approve, ApproveInput(task="web-off", by="alice")
            )
        assert "web-off is not an approval" in str(wrong_task.value.cause)
        status = await handle.execute_update(
            RunbookWorkflow.approve, ApproveInput(task="sign-off", by="bob", comment="lgtm")
        )
        assert any("sign-off: approved by bob at 20" in e and "lgtm" in e for e in status.events)
        report = await runbook_result(handle)
        assert report.outcome == "completed"
        sign_off = next(t for t in report.tasks if t.id == "sign-off")
        assert sign_off.phase == TaskPhase.DONE and "by='bob'" in sign_off.message
        assert (await stack.fleet.topology()).service_weights["eu-west/web"] == 0.0

    async def test_update_from_the_temporal_cli(self, stack: Stack) -> None:
        handle = await start(stack, runbook(GATED, on_failure="rollback", timeout="10m"))
        await waiting_for_approval(handle)
        process = await asyncio.create_subprocess_exec(
            binary_path("temporal"),
            "workflow", "update", "execute",
            "--address", stack.client.service_client.config.target_host,
            "--workflow-id", handle.id,
            "--name", "approve",
            "--input", json.dumps({"task": "sign-off", "by": "alice", "comment": "from the CLI"}),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        report = await runbook_result(handle)
        assert report.outcome == "completed"
        assert any("approved by alice" in e and "from the CLI" in e for e in report.events)


class TestApprovalTimeout:
    """No approval in time fails the task into its on_failure: rollback undoes the steps
    taken before it; continue lets the run finish as failed."""

    async def test_timeout_rolls_back(self, stack: Stack) -> None:
        before = (await stack.fleet.topology()).service_weights.get("eu-west/web", 1.0)
        handle = await start(stack, runbook(GATED, on_failure="rollback", timeout="1s"))
        report = await runbook_result(handle)
        assert report.outcome == "rolled_back"
        phases = {t.id: t.phase for t in report.tasks}
        assert phases == {"web-off": TaskPhase.ROLLED_BACK, "sign-off": TaskPhase.FAILED}
        sign_off = next(t for t in report.tasks if t.id == "sign-off")
        assert "no approval within 1s" in sign_off.message
        after = (await stack.fleet.topology()).service_weights.get("eu-west/web", 1.0)
        assert after == before

    async def test_timeout_continues(self, stack: Stack) -> None:
        handle = await start(stack, runbook(GATED, on_failure="continue", timeout="1s"))
        report = await runbook_result(handle)
        assert report.outcome == "completed"
        phases = {t.id: t.phase for t in report.tasks}
        assert phases == {"web-off": TaskPhase.DONE, "sign-off": TaskPhase.SKIPPED}
        sign_off = next(t for t in report.tasks if t.id == "sign-off")
        assert sign_off.skipped == SkipReason.CONTINUED
        assert "no approval within 1s" in sign_off.message


class TestDrillVersusReal:
    """``when: drill`` tasks run only in drills, ``when: real`` only in real runs; the
    others are skipped, saying why."""

    @pytest.mark.parametrize(("mode", "ran", "skipped"), [
        ("drill", "drill-only", "real-only"),
        ("real", "real-only", "drill-only"),
    ])  # fmt: skip
    async def test_mode_selects_tasks(
        self, stack: Stack, mode: RunMode, ran: str, skipped: str
    ) -> None:
        report = await runbook_result(await start(stack, runbook(MODES), mode))
        assert report.mode == mode and report.outcome == "completed"
        tasks = {t.id: t for t in report.tasks}
        assert tasks["always"].phase == tasks[ran].phase == TaskPhase.DONE
        assert tasks[skipped].phase == TaskPhase.SKIPPED
        assert f"this is a {mode} run" in tasks[skipped].message
