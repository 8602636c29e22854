"""``orchestrator rebalance start|status|pause|resume|stop`` against a real dev server and
the model lab, each command its own process, as an operator runs them."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from tests.workflows.conftest import Stack
from tests.workflows.runbook.test_drain import cli


async def status_of(stack: Stack) -> dict:
    code, out, err = await cli(stack, "rebalance", "status", "--json")
    assert code == 0, err
    return json.loads(out)


class TestRebalanceCommands:
    """Start runs the rebalancer, status shows its epochs, pause and resume are recorded
    with who did it, stop ends the workflow and leaves routing as last published."""

    async def test_start_status_pause_resume_stop(self, stack: Stack) -> None:
        code, out, err = await cli(
            stack, "rebalance", "start", "--epoch-s", "0.5", "--window-s", "5"
        )
        assert code == 0 and "rebalancer running" in out, err
        try:
            for _ in range(100):
                status = await status_of(stack)
                if any(e["outcome"] == "published" for e in status["epochs"]):
                    break
                await asyncio.sleep(0.2)
            assert any(e["outcome"] == "published" for e in status["epochs"]), status["epochs"]

            code, out, err = await cli(stack, "rebalance", "pause", "--reason", "cli test")
            assert code == 0 and "paused" in out, err
            paused = await status_of(stack)
            assert paused["paused_by"] and paused["pause_reason"] == "cli test"

            code, out, err = await cli(stack, "rebalance", "resume")
            assert code == 0 and "resumed" in out, err
            assert (await status_of(stack))["paused_by"] is None
        finally:
            code, out, err = await cli(stack, "rebalance", "stop")
        assert code == 0 and "stopped after its epoch in progress" in out, err
        desc = await stack.client.get_workflow_handle("rebalancer").describe()
        assert desc.status == WorkflowExecutionStatus.COMPLETED


class TestNotRunning:
    """`rebalance status` on a rebalancer that is not running says so (and how it ended),
    exits non-zero, and never shows the closed run's last epoch as if it were live;
    `undrain` without a rebalancer refuses at once, before any workflow starts."""

    async def test_status_of_a_stopped_rebalancer(self, stack: Stack) -> None:
        code, out, err = await cli(stack, "rebalance", "start", "--epoch-s", "0.5")
        assert code == 0, err
        code, out, err = await cli(stack, "rebalance", "stop", "--reason", "chaos test")
        assert code == 0, err

        code, out, err = await cli(stack, "rebalance", "status")
        assert code != 0
        assert "the rebalancer stopped" in err and "chaos test" in err
        assert "running" not in out and "rebalance start" in err
        code, out, err = await cli(stack, "rebalance", "status", "--json")
        assert code != 0
        answer = json.loads(out)
        assert answer["running"] is False and answer["status"] == "stopped"

    async def test_status_of_a_terminated_rebalancer(self, stack: Stack) -> None:
        code, out, err = await cli(stack, "rebalance", "start", "--epoch-s", "0.5")
        assert code == 0, err
        await stack.client.get_workflow_handle("rebalancer").terminate(reason="chaos test")

        code, out, err = await cli(stack, "rebalance", "status", "--json")
        assert code != 0
        answer = json.loads(out)
        assert answer["status"] == "terminated" and answer["cause"] == "chaos test"

    async def test_undrain_refused_without_a_rebalancer(self, stack: Stack) -> None:
        handle = stack.client.get_workflow_handle("rebalancer")
        with contextlib.suppress(RPCError):
            await handle.terminate("not for this test")

        code, out, err = await cli(stack, "undrain", "eu-west", "--wait")
        assert code != 0
        assert "undrain eu-west refused" in err and "rebalance start" in err
        assert len(err.strip().splitlines()) == 1, err
        with pytest.raises(RPCError):
            await stack.client.get_workflow_handle("undrain-eu-west").describe()
