"""``orchestrator report`` on real runs: a drain runbook and the rebalancer it went through, on a
real Temporal dev server, a real worker and the model lab (tests/reports/test_browser.py opens
a report in Chromium)."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from orchestrator import registry
from orchestrator.cli import app
from orchestrator.clients.training import start_supervisor
from orchestrator.config import Settings
from orchestrator.contracts.load_test import LoadTestInput
from orchestrator.contracts.runbook import ApproveInput, TaskPhase
from orchestrator.contracts.training_supervisor import SupervisorInput, SupervisorState
from orchestrator.policy.rebalance.model import Constraints
from orchestrator.reports import gather_report, latest_workflow_id, write_report
from orchestrator.reports.models import (
    LoadTestReport,
    RebalancerReport,
    RunbookReportView,
    TrainingReport,
)
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import WorkerFactory
from tests.reports.test_render import charts
from tests.workflows.conftest import Stack
from tests.workflows.runbook.conftest import DRAIN, runbook, start, wait_phase
from tests.workflows.training_support import (
    JOB,
    end_earlier_supervisor,
    inject,
    training_config,
    wait_job,
)
from workflows.load_test import LiveLoadTestWorkflow
from workflows.runbook import RunbookWorkflow

REGIONS = ("us-east", "us-west", "eu-west")

runner = CliRunner()


async def cli(client: Client, *args: str) -> Result:
    """``orchestrator ARGS`` against this test's server, in-process: the same Typer app and
    code path, without a new interpreter importing matplotlib (seconds on a loaded machine).
    A thread, because the command runs its own event loop."""
    env = {"HOME": "/nonexistent", "TEMPORAL_ADDRESS": client.service_client.config.target_host}
    return await asyncio.to_thread(runner.invoke, app, list(args), env=env)


async def load_test_report(stack: Stack, tmp_path: Path) -> None:
    """A three-step load test, reported: the curve with the lab's bands, the capacity marked."""
    inp = LoadTestInput(region="eu-west", p99_slo_ms=400.0, window_s=0.5, settle_s=0.0,
                        max_steps=3)  # fmt: skip
    handle = await stack.client.start_workflow(
        LiveLoadTestWorkflow.run, inp, id=f"loadtest-{uuid.uuid4().hex[:6]}",
        task_queue=stack.task_queue,
    )  # fmt: skip
    result = await handle.result()
    report = await gather_report(stack.client, handle.id)
    assert isinstance(report, LoadTestReport) and report.result == result
    # The band definitions come from the run's input: the lab set the test watched.
    assert [m.name for m in report.metrics] == [m.name for m in inp.watched_metrics()]
    out = await write_report(stack.client, handle.id, tmp_path / "loadtest.html")
    html = out.read_text()
    assert set(charts(html)) == {
        "Load-test curve: health metrics of eu-west/web against load",
        "Load per step on eu-west/web",
    }
    assert f"{result.estimate.load:.1f} rps ({result.estimate.method})" in html
    assert len(re.findall(r"<tr><td>\d+</td>", html)) == len(result.history)


class TestDrainReport:
    """A load test's report shows its curve and capacity; a drain's report, written while it waits for approval and again when it is done, shows
    its tasks on the timeline with the critical path, the approval, and the drained region's
    share falling, all read from Temporal; the rebalancer's report charts its epochs."""

    async def test_load_test_then_drain(
        self, stack: Stack, balanced: dict[str, dict[str, float]], tmp_path: Path
    ) -> None:
        # First a short live load test of eu-west (it puts the routing back when it ends).
        await load_test_report(stack, tmp_path)

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
            "Gates of shift-traffic: p99 and error rate of the receiving regions",
        }
        # The table marks exactly the workflow's own critical path.
        assert re.findall(r'<tr class="critical"><td>([^<]+)</td>', html) == result.critical_path
        assert "approved by alice" in html
        finished = await gather_report(stack.client, handle.id)
        assert isinstance(finished, RunbookReportView)
        shares = [p.share for p in finished.region_shares]
        assert shares[0] > 0.1 and shares[-1] < 0.01  # eu-west drained over the run
        # The gated task's readings, as the run recorded them: after each of its two steps,
        # the receiving regions' p99 and error rate, under the gate's threshold.
        gated = next(t for t in finished.tasks if t.id == "shift-traffic")
        assert [(r.step, r.passed, r.held) for r in gated.gates] == [
            (1, True, False),
            (2, True, False),
        ]
        for reading in gated.gates:
            assert set(reading.regions) == {"us-east", "us-west"}
            assert all(c.threshold == 0.05 and c.metric == "error_rate" for c in reading.checks)
            assert all(r.p99_ms is not None for r in reading.regions.values())

        # The rebalancer never finishes: its report is its status query, epoch by epoch.
        path = await write_report(stack.client, "rebalancer", tmp_path / "rebalancer.html")
        rebalancer = await gather_report(stack.client, "rebalancer")
        assert isinstance(rebalancer, RebalancerReport)
        # The target comes from the run's input (the balanced fixture keeps the default).
        assert rebalancer.target_utilization == Constraints().target_utilization
        kept = [e for e in rebalancer.status.epochs if e.outcome in ("published", "unchanged")]
        assert kept and all(set(e.shares) == set(e.utilization) == set(REGIONS) for e in kept)
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


class TestTrainingReport:
    """A supervised job that survives a GPU failure is reported with its step over time, the
    failure's MTTD, MTTR and lost steps, and the ETTR (the lab in model mode: no processes)."""

    async def test_gpu_failure_report(
        self,
        dev_env: WorkflowEnvironment,
        start_lab: LabFactory,
        make_worker: WorkerFactory,
        tmp_path: Path,
    ) -> None:
        lab = await start_lab(
            training_config(step_ms=10.0, total_steps=400), mode="model", faults=True
        )
        fleet = lab.fleet()
        ctx = registry.ActivityContext(
            settings=Settings(fleet_url=lab.url), fleet=fleet, client=dev_env.client
        )
        options = SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1)
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            handle = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=options
            )
            job = await wait_job(fleet, lambda j: (j.checkpoint_step or 0) >= 100)
            await inject(lab, "gpu-error", host=job.hosts[0])
            final = await handle.result()
            out = await write_report(dev_env.client, handle.id, tmp_path / "training.html")
            report = await gather_report(dev_env.client, handle.id)

        assert isinstance(report, TrainingReport)
        assert report.status == final and final.state is SupervisorState.FINISHED
        # The supervisor launched the job from scratch, after it started watching.
        assert report.started_at is not None and report.start_step == 0
        assert report.launched_at is not None and report.launched_at > report.started_at
        [failure] = final.failures
        html = out.read_text()
        assert list(charts(html)) == [f"Training job {JOB}: step over time"]
        assert f"<td>{failure.lost_steps}</td>" in html
        assert final.ettr is not None and f"{final.ettr * 100:.1f}%" in html
