"""Fixtures for the trigger tests: an in-memory starter, and the app over Temporal.

Over Temporal the runs are the real RunbookWorkflow on a worker with every
activity, against a model-mode lab; the test runbooks end in an approval, so a
run stays open (and repeats are deduplicated) until :func:`finish` approves it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.contracts.runbook import AlertResolvedInput, ApproveInput, RunbookRunInput
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import DemandConfig
from orchestrator.lab.server import LabThread, build_app
from orchestrator.runbook.spec import Runbook
from orchestrator.triggers.auth import load_credentials
from orchestrator.triggers.rules import parameters_key
from orchestrator.triggers.server import create_app
from orchestrator.triggers.starter import (
    RunInfo,
    StartFailed,
    StartRequest,
    StartResult,
    TemporalRunStarter,
)
from tests.fixtures.temporal import new_worker
from tests.triggers.payloads import APPROVER, HMAC_SECRET, TOKEN
from tests.workflows.conftest import ROOMY_RPS, lab_config

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class MemoryStarter:
    """Temporal's id rules in a dict; ``delay_s`` widens races, ``fail`` simulates Temporal down.

    A start with ``once`` (an alert episode's run) is refused for an id that ever ran;
    any other start only while a run with the id is open. :meth:`close` ends a run.
    """

    delay_s: float = 0.0
    fail: bool = False
    open: dict[str, str] = field(default_factory=dict)
    closed: dict[str, str] = field(default_factory=dict)
    started: list[StartRequest] = field(default_factory=list)
    signals: list[tuple[str, AlertResolvedInput]] = field(default_factory=list)
    #: (runbook, parameters key) -> start time, as visibility would find it
    history: dict[tuple[str, str], datetime] = field(default_factory=dict)

    async def start(self, request: StartRequest) -> StartResult:
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise StartFailed("temporal refused to start: UNAVAILABLE: test")
        existing = self.open.get(request.workflow_id)
        if existing is None and request.once:
            existing = self.closed.get(request.workflow_id)
        if existing is not None:
            return StartResult(workflow_id=request.workflow_id, run_id=existing, started=False)
        run_id = uuid.uuid4().hex
        self.open[request.workflow_id] = run_id
        self.started.append(request)
        return StartResult(workflow_id=request.workflow_id, run_id=run_id, started=True)

    def close(self, workflow_id: str) -> None:
        self.closed[workflow_id] = self.open.pop(workflow_id)

    async def signal_resolved(self, workflow_id: str, signal: AlertResolvedInput) -> str | None:
        run_id = self.open.get(workflow_id)
        if run_id is not None:
            self.signals.append((workflow_id, signal))
        return run_id

    async def find_run(self, workflow_id: str) -> RunInfo | None:
        if workflow_id in self.open:
            return RunInfo(run_id=self.open[workflow_id], open=True)
        if workflow_id in self.closed:
            return RunInfo(run_id=self.closed[workflow_id], open=False)
        return None

    async def last_start(
        self, runbook: str, parameters: Mapping[str, Any], region: str | None, since: datetime
    ) -> datetime | None:
        found = self.history.get((runbook, parameters_key(parameters)))
        return found if found is not None and found >= since else None


AppClient = Callable[..., Awaitable[httpx.AsyncClient]]


def asgi_client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://triggers")


def make_app(runbooks: list[Runbook], starter: object) -> FastAPI:
    creds = load_credentials(token=TOKEN, hmac_secret=HMAC_SECRET)
    return create_app(runbooks, starter, creds)  # type: ignore[arg-type]


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
    """Approve the test runbook's last task, so the run completes."""
    await client.get_workflow_handle(workflow_id).execute_update(
        "approve", ApproveInput(task="sign-off", by=APPROVER, comment="test over")
    )


@pytest.fixture
def unique() -> str:
    """A runbook-name suffix no other test uses (the dev server is shared by the session)."""
    return uuid.uuid4().hex[:8]
