"""Fixtures for the trigger tests: an in-memory starter, and the app over Temporal.

Over Temporal the runs are the real RunbookWorkflow on a worker with every
activity, against a model-mode lab; the test runbooks end in an approval, so a
run stays open (and repeats are deduplicated) until :func:`finish` approves it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.contracts.runbook import ApproveInput, RunbookRunInput
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import DemandConfig
from orchestrator.lab.server import LabThread, build_app
from orchestrator.triggers.starter import TemporalRunStarter
from testkit.lab import ROOMY_RPS, lab_config
from testkit.temporal import terminate_if_running
from testkit.trigger_payloads import APPROVER
from testkit.triggers import AUTH, AppClient, MemoryStarter, asgi_client, make_app
from tests.fixtures.temporal import new_worker

__all__ = [
    "AUTH",
    "AppClient",
    "MemoryStarter",
    "TemporalStack",
    "asgi_client",
    "finish",
    "make_app",
    "started_with",
    "temporal_stack",
    "unique",
]


@dataclass
class TemporalStack:
    client: Client
    task_queue: str
    starter: TemporalRunStarter


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def temporal_stack(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[TemporalStack]:
    """Every workflow and activity on a fresh task queue of the session's dev server."""
    with LabThread(
        build_app(lab_config(demand=DemandConfig(total_rps=ROOMY_RPS)), mode="model")
    ) as lab:
        fleet = HttpFleet(lab.url)
        queue = f"triggers-{uuid.uuid4().hex[:10]}"
        settings = Settings(
            task_queue=queue, fleet_url=lab.url, state_dir=tmp_path_factory.mktemp("state")
        )
        ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=dev_env.client)
        async with new_worker(dev_env.client, registry.activities(ctx), task_queue=queue):
            yield TemporalStack(dev_env.client, queue, TemporalRunStarter(dev_env.client, queue))
        await fleet.aclose()


async def started_with(client: Client, handle: WorkflowHandle) -> RunbookRunInput:
    """The input a run was started with, from its first history event."""
    history = await handle.fetch_history()
    attrs = history.events[0].workflow_execution_started_event_attributes
    [decoded] = await client.data_converter.decode(attrs.input.payloads, [RunbookRunInput])
    assert isinstance(decoded, RunbookRunInput)
    return decoded


async def finish(client: Client, workflow_id: str) -> None:
    """Approve the test runbook's last task, so the run completes, and wait until
    visibility no longer lists it running: the next test's drain of the same region on
    this module's queue reads running drains from visibility, which lags a run's close
    (under load in CI a finished drain was still listed, and the next drain refused)."""
    await client.get_workflow_handle(workflow_id).execute_update(
        "approve", ApproveInput(task="sign-off", by=APPROVER, comment="test over")
    )
    await closed_in_visibility(client, workflow_id)


async def end(client: Client, workflow_id: str) -> None:
    """Terminate a run the test has no more use for (if still running), and wait as
    :func:`finish` does until visibility no longer lists it running."""
    await terminate_if_running(client.get_workflow_handle(workflow_id), "test over")
    await closed_in_visibility(client, workflow_id)


async def closed_in_visibility(client: Client, workflow_id: str) -> None:
    query = f"WorkflowId = '{workflow_id}' AND ExecutionStatus = 'Running'"
    for _ in range(300):
        if (await client.count_workflows(query)).count == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"visibility still lists {workflow_id} running 30 s after it closed")


@pytest.fixture
def unique() -> str:
    """A runbook-name suffix no other test uses (the dev server is shared by the session)."""
    return uuid.uuid4().hex[:8]
