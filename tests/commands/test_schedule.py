"""``orchestrator schedule``: what a created schedule starts, and one-line errors."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import ScheduleActionStartWorkflow, ScheduleOverlapPolicy
from temporalio.testing import WorkflowEnvironment

from orchestrator.contracts.load_test import LoadTestInput
from orchestrator.lab.config import load_config
from orchestrator.lab.server import LabThread, build_app

ORCHESTRATOR = str(Path(sys.executable).parent / "orchestrator")


@pytest.fixture(scope="module")
def fleet_url() -> Iterator[str]:
    """A model lab: a schedule's regions are checked against the fleet before it is made."""
    with LabThread(build_app(load_config(None), mode="model")) as lab:
        yield lab.url


async def cli(env: WorkflowEnvironment, fleet: str, *args: str) -> tuple[int, str, str]:
    environ = {
        **os.environ,
        "HOME": "/nonexistent",
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "ORCHESTRATOR_TASK_QUEUE": "schedule-cli-test",
        "ORCHESTRATOR_FLEET_URL": fleet,
    }
    process = await asyncio.create_subprocess_exec(
        ORCHESTRATOR, *args, env=environ, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


class TestLoadTestSchedule:
    """``create loadtest`` makes a daily schedule that starts LiveLoadTestWorkflow with the
    region asked for, never two at once; pause and delete act on it."""

    async def test_create_pause_delete(self, dev_env: WorkflowEnvironment, fleet_url: str) -> None:
        schedule_id = f"lt-{uuid.uuid4().hex[:6]}"
        code, _, err = await cli(
            dev_env, fleet_url, "schedule", "create", "loadtest", schedule_id, "--region", "us-east"
        )
        assert code == 0, err
        handle = dev_env.client.get_schedule_handle(schedule_id)
        described = await handle.describe()
        action = described.schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        assert action.workflow == "LiveLoadTestWorkflow"
        assert action.task_queue == "schedule-cli-test"
        [arg] = await dev_env.client.data_converter.decode(action.args, [LoadTestInput])  # type: ignore[arg-type]
        assert isinstance(arg, LoadTestInput) and arg.region == "us-east"
        assert [i.every.total_seconds() for i in described.schedule.spec.intervals] == [86400]
        assert described.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
        assert not described.schedule.state.paused

        code, _, err = await cli(
            dev_env, fleet_url, "schedule", "pause", schedule_id, "--note", "freeze"
        )
        assert code == 0, err
        state = (await handle.describe()).schedule.state
        assert state.paused and state.note == "freeze"
        code, _, err = await cli(dev_env, fleet_url, "schedule", "delete", schedule_id)
        assert code == 0, err
        code, out, err = await cli(dev_env, fleet_url, "schedule", "list", "--json")
        assert code == 0 and schedule_id not in out


class TestErrors:
    """Bad input is one line and a non-zero exit, before anything is created."""

    async def test_bad_inputs(
        self, dev_env: WorkflowEnvironment, fleet_url: str, tmp_path: Path
    ) -> None:
        cases = [
            (["create", "drill", "--blocked", "funday 00:00-01:00"], "unknown day"),
            (["create", "drill", "--every", "soon"], "--every"),
            (["create", "drill", "--every", "99999999999999d"], "longer than the maximum"),
            (["create", "drill", "--every", "inf"], "not a finite duration"),
            (["create", "drill", "--runbook", str(tmp_path / "none.yaml")], "none.yaml"),
            (["create", "loadtest", "x", "--region", "us-east", "--window", "0"], "window"),
            (["pause", "no-such-schedule"], "no-such-schedule"),
        ]
        for args, expected in cases:
            code, out, err = await cli(dev_env, fleet_url, "schedule", *args)
            assert code != 0, args
            assert len(err.strip().splitlines()) == 1 and "Traceback" not in out + err, err
            assert expected in err, (args, err)
