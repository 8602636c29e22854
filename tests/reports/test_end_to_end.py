"""``orchestrator report`` on real runs: a drain runbook and the rebalancer it went through, on a
real Temporal dev server, a real worker and the model lab (tests/reports/test_browser.py opens
a report in Chromium)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from orchestrator.cli import app
from orchestrator.contracts.runbook import ApproveInput, TaskPhase
from orchestrator.policy.taiji_model import Constraints
from orchestrator.reports import gather_report, latest_workflow_id, write_report
from orchestrator.reports.models import RebalancerReport, RunbookReportView
from tests.reports.test_render import charts
from tests.workflows.conftest import Stack
from tests.workflows.runbook.conftest import DRAIN, runbook, start, wait_phase
from workflows.runbook import RunbookWorkflow

runner = CliRunner()


async def cli(client: Client, *args: str) -> Result:
    """``orchestrator ARGS`` against this test's server, in-process: the same Typer app and
    code path, without a new interpreter importing matplotlib (seconds on a loaded machine).
    A thread, because the command runs its own event loop."""
    env = {"HOME": "/nonexistent", "TEMPORAL_ADDRESS": client.service_client.config.target_host}
    return await asyncio.to_thread(runner.invoke, app, list(args), env=env)


class TestDrainReport:
    """A drain's report, written while it waits for approval and again when it is done, shows
    its tasks on the timeline with the critical path, the approval, and the drained region's
    share falling, all read from Temporal; the rebalancer's report charts its epochs."""

    async def test_running_then_finished(
        self, stack: Stack, balanced: dict[str, dict[str, float]], tmp_path: Path
    ) -> None:
        handle = await start(stack, runbook(DRAIN, region="eu-west"))
        await wait_phase(handle, "sign-off", TaskPhase.RUNNING)

        # Running: the data is the status query; the critical path is projected from the DAG.
        running = await gather_report(stack.client, handle.id)
        assert isinstance(running, RunbookReportView)
        assert running.header.source == "query" and running.header.status == "running"
        assert running.critical_path[0] == "shift-traffic"
        assert running.critical_path[-1] == "sign-off"
        assert await latest_workflow_id(stack.client) == handle.id  # the newest of our types

        await handle.execute_update(
            RunbookWorkflow.approve, ApproveInput(task="sign-off", by="alice", comment="go")
        )
        result = await handle.result()
        assert result.outcome == "completed"

        out_file = tmp_path / "drain.html"
        done = await cli(stack.client, "report", handle.id, "--out", str(out_file))
        assert done.exit_code == 0, done.stderr
        assert str(out_file) in done.stdout.replace("\n", "")
        html = out_file.read_text()
        assert set(charts(html)) == {
            "Task timeline of test-drain (red: critical path)",
            "Traffic share of eu-west during the run",
        }
        # The table marks exactly the workflow's own critical path.
        assert re.findall(r'<tr class="critical"><td>([^<]+)</td>', html) == result.critical_path
        assert "approved by alice" in html
        finished = await gather_report(stack.client, handle.id)
        assert isinstance(finished, RunbookReportView)
        shares = [p.share for p in finished.region_shares]
        assert shares[0] > 0.1 and shares[-1] < 0.01  # eu-west drained over the run

        # The rebalancer never finishes: its report is its status query, epoch by epoch.
        path = await write_report(stack.client, "rebalancer", tmp_path / "rebalancer.html")
        rebalancer = await gather_report(stack.client, "rebalancer")
        assert isinstance(rebalancer, RebalancerReport)
        # The target comes from the run's input (the balanced fixture keeps the default).
        assert rebalancer.target_utilization == Constraints().target_utilization
        assert all(e.shares for e in rebalancer.status.epochs if e.outcome != "skipped")
        assert len(charts(path.read_text())) == 2


class TestRefusals:
    """An unknown id is one line and a non-zero exit; so is asking for no run at all."""

    async def test_unknown_and_missing_id(
        self, dev_env: WorkflowEnvironment, tmp_path: Path
    ) -> None:
        out = tmp_path / "x.html"
        done = await cli(dev_env.client, "report", "no-such-run", "--out", str(out))
        assert done.exit_code != 0 and "no workflow no-such-run" in done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        done = await cli(dev_env.client, "report", "--json")
        assert done.exit_code == 2 and "give a workflow id or --last" in done.stderr
        done = await cli(dev_env.client, "report", "some-id", "--last")
        assert done.exit_code == 2
        assert not out.exists()
