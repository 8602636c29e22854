"""A lab fleet and a worker wired to it, for workflow tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import load_config
from orchestrator.lab.server import LabThread, build_app
from tests.fixtures.temporal import new_worker


@dataclass
class Stack:
    client: Client
    fleet: HttpFleet
    lab_url: str
    task_queue: str
    settings: Settings


#: edge demand low enough that two regions take the third's load under 75%, so the drain
#: capacity check lets a drain of any one region start (the default demand leaves no room)
ROOMY_RPS = 120.0


def lab_config(**changes: Any) -> Any:
    return load_config(None).model_copy(update=changes)


@pytest.fixture
def model_lab() -> Iterator[LabThread]:
    """The default lab in model mode, routed to the nearest region (so it starts unbalanced)."""
    with LabThread(build_app(lab_config(initial_routing="nearest"), mode="model")) as lab:
        yield lab


@asynccontextmanager
async def open_stack(client: Client, lab_url: str, state_dir: Any) -> AsyncIterator[Stack]:
    """A worker on a fresh task queue running every workflow and activity against the lab."""
    fleet = HttpFleet(lab_url)
    queue = f"test-{uuid.uuid4().hex[:10]}"
    settings = Settings(task_queue=queue, fleet_url=lab_url, state_dir=state_dir)
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
    worker: Worker = new_worker(client, registry.activities(ctx), task_queue=queue)
    async with worker:
        yield Stack(client, fleet, lab_url, queue, settings)
    await fleet.aclose()


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    dev_env: WorkflowEnvironment, model_lab: LabThread, tmp_path: Any
) -> AsyncIterator[Stack]:
    """A worker on a fresh task queue running every workflow and activity against ``model_lab``."""
    async with open_stack(dev_env.client, model_lab.url, tmp_path) as opened:
        yield opened
