"""The capacity check of a drain, in the workflow and at the CLI, on the lab."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import ApproveInput, TaskPhase
from tests.workflows.conftest import Stack
from tests.workflows.runbook.conftest import DRAIN, close, runbook, start, wait_phase
from workflows.runbook import RunbookWorkflow

BAD = """
name: bad
kind: drain
tasks:
  - id: a
    template: no_such_template
    args: {}
"""

NO_SHIFT = """
name: batch-off
kind: drain
parameters:
  region: {type: region}
tasks:
  - id: stop-batch
    template: job_update
    args: {operation: stop, region: "${params.region}"}
    restore: auto
"""


async def refusal_of(handle: Any) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as failed:
        await runbook_result(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def cli(stack: Stack, *args: str) -> tuple[int, str, str]:
    """Run ``orchestrator ARGS`` in its own process against this test's server and lab."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": stack.client.service_client.config.target_host,
        "ORCHESTRATOR_FLEET_URL": stack.lab_url,
        "ORCHESTRATOR_TASK_QUEUE": stack.task_queue,
        "ORCHESTRATOR_STATE_DIR": str(stack.settings.state_dir),
        "COLUMNS": "200",
    }
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("orchestrator")),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class TestCapacityRefusal:
    """A drain after which another region would run above the target fails before any
    change, and the refusal gives the predicted numbers."""

    async def test_refused_with_the_numbers_and_nothing_changed(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        # The roomy lab puts the others at ~48% after draining eu-west: over a 40% target.
        handle = await start(stack, runbook(DRAIN, region="eu-west"), target_utilization=0.4)
        cause = await refusal_of(handle)
        assert cause.type == "UnsafeRequest"
        assert "refusing to drain eu-west" in cause.message
        assert "> target 0.40" in cause.message and "us-east" in cause.message
        assert close((await stack.fleet.routing()).fractions, balanced)
        assert not [e for e in await stack.fleet.audit() if handle.id in e.idempotency_key]

    async def test_second_overlapping_drain_refused(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        first = await start(stack, runbook(DRAIN, region="eu-west"))
        await wait_phase(first, "sign-off", TaskPhase.RUNNING)
        held = (await stack.fleet.routing()).fractions
        # Alone, draining us-west is safe (same roomy lab); with eu-west out it is not.
        second = await start(stack, runbook(DRAIN, region="us-west"))
        cause = await refusal_of(second)
        assert cause.type == "UnsafeRequest"
        assert "together with running drain(s) of eu-west" in cause.message
        assert "us-east would run" in cause.message
        assert close((await stack.fleet.routing()).fractions, held)
        await first.execute_update(
            RunbookWorkflow.approve, ApproveInput(task="sign-off", by="alice")
        )
        assert (await runbook_result(first)).outcome == "completed"


class TestDrainCommand:
    """``orchestrator drain``: --dry-run forecasts and changes nothing; a refused drain
    never starts, and neither does one that shifts traffic with no rebalancer running
    (like ``undrain``, it refuses at once); an invalid runbook never starts; steering
    commands reach the run."""

    async def test_dry_run_changes_nothing(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        audit_before = len(await stack.fleet.audit())
        code, out, err = await cli(stack, "drain", "eu-west", "--dry-run", "--json")
        assert code == 0, err
        answer = json.loads(out)
        after = {r["region"]: r for r in answer["forecast"]["regions"]}
        assert after["eu-west"]["role"] == "draining"
        assert 0.3 < after["us-east"]["utilization_after"] < 0.75
        assert answer["forecast"]["safe"] is True
        assert answer["plan"]["layers"][0] and answer["plan"]["critical_path"]["tasks"]
        assert len(await stack.fleet.audit()) == audit_before
        assert close((await stack.fleet.routing()).fractions, balanced)
        with pytest.raises(RPCError):
            await stack.client.get_workflow_handle("drain-eu-west").describe()

    async def test_refused_drain_never_starts(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        code, out, err = await cli(stack, "drain", "eu-west", "--target", "0.4")
        assert code != 0
        assert "refusing to drain eu-west" in err and len(err.strip().splitlines()) == 1
        with pytest.raises(RPCError):
            await stack.client.get_workflow_handle("drain-eu-west").describe()

    async def test_refused_at_once_without_a_rebalancer(self, stack: Stack) -> None:
        # No rebalancer runs on this test's task queue: nobody would hold the region.
        code, out, err = await cli(stack, "drain", "eu-west", "--wait")
        assert code != 0
        assert "drain eu-west refused" in err and "rebalance start" in err
        assert len(err.strip().splitlines()) == 1, err
        with pytest.raises(RPCError):
            await stack.client.get_workflow_handle("drain-eu-west").describe()

    async def test_runbook_without_a_traffic_shift_needs_no_rebalancer(
        self, stack: Stack, tmp_path: Path
    ) -> None:
        file = tmp_path / "no-shift.yaml"
        file.write_text(NO_SHIFT)
        code, out, err = await cli(stack, "drain", "eu-west", "--runbook", str(file), "--wait")
        assert code == 0, err
        assert "completed" in out

    async def test_invalid_runbook_never_starts(self, stack: Stack, tmp_path: Path) -> None:
        bad = tmp_path / "bad.yaml"
        bad.write_text(BAD)
        code, _, err = await cli(stack, "runbook", "run", str(bad), "--id", "bad-run")
        assert code != 0 and "unknown template" in err
        assert len(err.strip().splitlines()) == 1
        with pytest.raises(RPCError):
            await stack.client.get_workflow_handle("bad-run").describe()

    async def test_run_approve_and_status(
        self, stack: Stack, balanced: dict[str, dict[str, float]], tmp_path: Path
    ) -> None:
        file = tmp_path / "test-drain.yaml"
        file.write_text(DRAIN)
        code, out, err = await cli(
            stack, "runbook", "run", str(file), "-p", "region=eu-west", "--id", "cli-drain"
        )
        assert code == 0, err
        handle = stack.client.get_workflow_handle("cli-drain")
        await wait_phase(handle, "sign-off", TaskPhase.RUNNING)
        code, _, err = await cli(
            stack, "runbook", "approve", "cli-drain", "--task", "sign-off", "--as", "mallory"
        )
        assert code != 0 and "mallory may not approve" in err
        code, _, err = await cli(
            stack,
            "runbook",
            "approve",
            "cli-drain",
            "--task",
            "sign-off",
            "--as",
            "alice",
            "--comment",
            "looks fine",
        )
        assert code == 0, err
        await runbook_result(handle)
        code, out, err = await cli(stack, "runbook", "status", "cli-drain", "--json")
        assert code == 0, err
        report = json.loads(out)
        assert report["outcome"] == "completed"
        assert any("approved by alice" in e and "looks fine" in e for e in report["events"])
