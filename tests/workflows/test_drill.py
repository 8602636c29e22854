"""Drain drills from a Temporal Schedule created by the CLI, on the model lab.

The schedule is triggered by hand (``handle.trigger()``) instead of waiting for
its interval, so each drill starts when the test says.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client, ScheduleHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from orchestrator.contracts.drill import BlockedWindow, DrillInput, DrillResult
from orchestrator.contracts.runbook import RunbookRunInput
from orchestrator.lab.config import DemandConfig
from orchestrator.lab.server import LabThread, build_app
from orchestrator.runbook import load_runbook
from orchestrator.runbook.params import bind
from orchestrator.temporal import REGION, RUN_KIND, RUNBOOK
from testkit.lab import ROOMY_RPS, lab_config
from tests.triggers.servers import alertmanager
from tests.workflows.conftest import Stack
from workflows.drill import DrillWorkflow
from workflows.runbook import RunbookWorkflow

ORCHESTRATOR = str(Path(sys.executable).parent / "orchestrator")

DRAIN = """
name: {name}
kind: drain
parameters:
  region: {{type: region}}
  hold: {{type: duration, default: 0.2s}}
tasks:
  - id: web-off
    template: service_weight
    args: {{region: "${{params.region}}", service: web, weight: 0}}
    restore: auto
  - id: hold
    template: delay
    depends_on: [web-off]
    args: {{duration: "${{params.hold}}"}}
"""
RESTORE = """
name: {name}
kind: restore
parameters:
  region: {{type: region}}
tasks:
  - id: web-on
    template: service_weight
    args: {{region: "${{params.region}}", service: web, weight: 1}}
"""
NO_RECEIVER = "route: {receiver: none}\nreceivers: [{name: none}]\n"


async def cli(stack: Stack, *args: str) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "HOME": "/nonexistent",
        "TEMPORAL_ADDRESS": stack.client.service_client.config.target_host,
        "ORCHESTRATOR_TASK_QUEUE": stack.task_queue,
        # the schedule's regions are checked against the fleet before it is created
        "ORCHESTRATOR_FLEET_URL": stack.lab_url,
    }
    process = await asyncio.create_subprocess_exec(
        ORCHESTRATOR, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.fixture
def model_lab() -> Iterator[LabThread]:
    """A model lab with room for any one region's drain, so the capacity check lets drills run."""
    config = lab_config(demand=DemandConfig(total_rps=ROOMY_RPS), initial_routing="nearest")
    with LabThread(build_app(config, mode="model")) as lab:
        yield lab


@pytest_asyncio.fixture(loop_scope="session")
async def runbook_files(tmp_path: Path) -> AsyncIterator[tuple[Path, Path]]:
    suffix = uuid.uuid4().hex[:6]
    drain, restore = tmp_path / "drain.yaml", tmp_path / "restore.yaml"
    drain.write_text(DRAIN.format(name=f"drill-drain-{suffix}"))
    restore.write_text(RESTORE.format(name=f"drill-restore-{suffix}"))
    yield drain, restore


async def run_once(stack: Stack, path: Path, region: str) -> None:
    """One finished run of the runbook at ``path`` on ``region``."""
    rb = load_runbook(path)
    handle = await stack.client.start_workflow(
        RunbookWorkflow.run,
        RunbookRunInput(runbook=bind(rb, {"region": region}), requested_by="test"),
        id=f"seed-{rb.kind.value}-{region}-{uuid.uuid4().hex[:6]}",
        task_queue=stack.task_queue,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(REGION, region),
                SearchAttributePair(RUNBOOK, rb.name),
                SearchAttributePair(RUN_KIND, rb.kind.value),
            ]
        ),
    )
    report = await handle.result()
    assert report.outcome == "completed", report


async def drain_once(stack: Stack, files: tuple[Path, Path], region: str) -> None:
    """A finished drain of ``region`` and its restore: the history the drill picks from.
    The restore matters: a drain leaves its region out until restored, and the capacity
    check rightly refuses to drain a second region while the first is still out."""
    drain, restore = files
    await run_once(stack, drain, region)
    await run_once(stack, restore, region)


async def wait_count(client: Client, query: str, count: int) -> None:
    for _ in range(100):
        if (await client.count_workflows(query)).count >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"visibility never showed {count} runs for {query}")


async def run_drill(client: Client, handle: ScheduleHandle) -> DrillResult:
    """Trigger the schedule and wait for the drill it starts."""
    before = len((await handle.describe()).info.recent_actions)
    await handle.trigger()
    for _ in range(200):
        actions = (await handle.describe()).info.recent_actions
        if len(actions) > before:
            started = actions[-1].action
            workflow_id = getattr(started, "workflow_id", "")
            return await client.get_workflow_handle(workflow_id, result_type=DrillResult).result()
        await asyncio.sleep(0.1)
    raise AssertionError("the schedule never started a drill")


def alert(**labels: str) -> list[dict[str, Any]]:
    return [
        {
            "labels": {"alertname": "RegionDown", **labels},
            "startsAt": (datetime.now(UTC) - timedelta(minutes=1)).isoformat(),
        }
    ]


class TestScheduledDrill:
    """A CLI-made schedule drills the least recently drained region, then restores it; a
    critical alert firing, or another drain running, skips the drill and says why."""

    async def test_schedule_skips_then_drills_in_turn(
        self, stack: Stack, runbook_files: tuple[Path, Path], tmp_path: Path
    ) -> None:
        drain, restore = runbook_files
        await drain_once(stack, runbook_files, "us-east")
        await drain_once(stack, runbook_files, "us-west")  # us-west most recent, eu-west never
        queue = f'TaskQueue = "{stack.task_queue}" AND RunKind = "drain"'
        await wait_count(stack.client, queue, 2)
        schedule_id = f"drill-{uuid.uuid4().hex[:6]}"
        async with (
            alertmanager(tmp_path, NO_RECEIVER) as am,
            httpx.AsyncClient(base_url=am, timeout=5.0) as http,
        ):
            code, out, err = await cli(
                stack,
                "schedule", "create", "drill", schedule_id,
                "--runbook", str(drain), "--restore", str(restore),
                "--region", "us-east", "--region", "us-west", "--region", "eu-west",
                "--alertmanager", am, "--every", "1h",
            )  # fmt: skip
            assert code == 0, err
            handle = stack.client.get_schedule_handle(schedule_id)

            firing = alert(severity="critical", region="us-east")
            assert (await http.post("/api/v2/alerts", json=firing)).status_code == 200
            await http.post("/api/v2/alerts", json=alert(severity="warning"))
            skipped = await run_drill(stack.client, handle)
            assert skipped.outcome == "skipped" and skipped.region is None
            assert "alert firing: RegionDown" in skipped.reason
            assert "severity=critical" in skipped.reason and "warning" not in skipped.reason
            topology = await stack.fleet.topology()
            assert topology.service_weights.get("eu-west/web", 1.0) == 1.0

            ended = dict(firing[0], endsAt=(datetime.now(UTC) - timedelta(seconds=1)).isoformat())
            assert (await http.post("/api/v2/alerts", json=[ended])).status_code == 200
            first = await run_drill(stack.client, handle)
            assert (first.outcome, first.region) == ("ran", "eu-west"), first.reason
            assert (first.runbook_outcome, first.restore_outcome) == ("completed", "completed")
            assert first.last_drained["eu-west"] is None
            assert first.last_drained["us-east"] < first.last_drained["us-west"]  # type: ignore[operator]
            drained = await stack.client.get_workflow_handle(first.workflow_id or "").describe()
            attrs = drained.typed_search_attributes
            assert (attrs.get(REGION), attrs.get(RUN_KIND)) == ("eu-west", "drain")
            await wait_count(stack.client, queue, 3)

            second = await run_drill(stack.client, handle)
            assert (second.outcome, second.region) == ("ran", "us-east"), second.reason

            code, out, err = await cli(stack, "schedule", "list", "--json")
            assert code == 0, err
            assert schedule_id in out and "DrillWorkflow" in out
            code, _, err = await cli(stack, "schedule", "pause", schedule_id)
            assert code == 0, err
            assert (await handle.describe()).schedule.state.paused
            code, _, err = await cli(stack, "schedule", "delete", schedule_id)
            assert code == 0, err
        # The drain was real on the lab and the restore put it back.
        assert (await stack.fleet.topology()).service_weights.get("us-east/web", 1.0) == 1.0
        code, _, err = await cli(stack, "schedule", "delete", schedule_id)
        assert code != 0 and len(err.strip().splitlines()) == 1

    async def test_running_drain_and_blocked_window_skip(
        self, stack: Stack, runbook_files: tuple[Path, Path]
    ) -> None:
        drain, _ = runbook_files
        rb = load_runbook(drain)
        busy = await stack.client.start_workflow(
            RunbookWorkflow.run,
            RunbookRunInput(
                runbook=bind(rb, {"region": "us-east", "hold": "60s"}), requested_by="t"
            ),
            id=f"busy-{uuid.uuid4().hex[:6]}",
            task_queue=stack.task_queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(RUN_KIND, "drain")]),
        )
        await wait_count(
            stack.client, f'TaskQueue = "{stack.task_queue}" AND ExecutionStatus = "Running"', 1
        )
        inp = DrillInput(runbook=rb, regions=["us-west"])
        result = await stack.client.execute_workflow(
            DrillWorkflow.run, inp, id=f"drill-{uuid.uuid4().hex[:6]}", task_queue=stack.task_queue
        )
        assert result.outcome == "skipped"
        assert f"another drain is running: {busy.id}" in result.reason
        await busy.terminate("test over")

        always = inp.model_copy(
            update={"blocked_windows": [BlockedWindow(start="00:00", end="24:00")]}
        )
        result = await stack.client.execute_workflow(
            DrillWorkflow.run,
            always,
            id=f"drill-{uuid.uuid4().hex[:6]}",
            task_queue=stack.task_queue,
        )
        assert result.outcome == "skipped" and "blocked window 00:00-24:00 UTC" in result.reason
