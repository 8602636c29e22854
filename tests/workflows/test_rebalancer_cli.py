"""``orchestrator rebalance start|status|pause|resume|stop`` against a real dev server and
the model lab, each command its own process, as an operator runs them."""

from __future__ import annotations

import asyncio
import json

from temporalio.client import WorkflowExecutionStatus

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
        assert code == 0 and "stopped" in out, err
        desc = await stack.client.get_workflow_handle("rebalancer").describe()
        assert desc.status == WorkflowExecutionStatus.TERMINATED
