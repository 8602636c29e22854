"""A lab fleet and a worker wired to it, for workflow tests.

- ``stack``: the dev server (real time) and a model lab on a port: for tests that need
  visibility (drains list the running drains), the CLI, or a lab a process can reach.
- ``clock_stack``: the time-skipping server and a :class:`MemoryFleet` on the workflow's
  clock: for workflow logic, with no step, gate or epoch waited for in real time. Its lab
  config is the ``fleet_config`` fixture (override it per directory or module).

A test that waits for a status polls with ``stack.sleep``, which on the time-skipping
server moves the workflows' time on instead of waiting.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import LabConfig
from orchestrator.lab.memory import URL, MemoryFleet
from orchestrator.lab.server import LabThread, build_app
from testkit.lab import ROOMY_RPS, lab_config
from tests.fixtures.temporal import new_worker, skip_time

__all__ = ["ROOMY_RPS", "Stack", "clock_stack", "fleet_config", "lab_config", "model_lab", "stack"]


@dataclass
class Stack:
    client: Client
    fleet: HttpFleet
    lab_url: str
    task_queue: str
    settings: Settings
    env: WorkflowEnvironment | None = None

    async def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of workflow time pass: skipped on the time-skipping server."""
        if self.env is not None and self.env.supports_time_skipping:
            await skip_time(self.env, seconds)
        else:
            await asyncio.sleep(seconds)

    def lab_http(self) -> httpx.AsyncClient:
        """A client for the lab's own routes (/lab/faults, /lab/truth); the caller closes it."""
        if isinstance(self.fleet, MemoryFleet):
            return self.fleet.http()
        return httpx.AsyncClient(base_url=self.lab_url)


@pytest.fixture
def model_lab() -> Iterator[LabThread]:
    """The default lab in model mode, routed to the nearest region (so it starts unbalanced)."""
    with LabThread(build_app(lab_config(initial_routing="nearest"), mode="model")) as lab:
        yield lab


@asynccontextmanager
async def open_stack(
    client: Client, lab_url: str, state_dir: Any, env: WorkflowEnvironment | None = None
) -> AsyncIterator[Stack]:
    """A worker on a fresh task queue running every workflow and activity against the lab."""
    fleet = HttpFleet(lab_url)
    queue = f"test-{uuid.uuid4().hex[:10]}"
    settings = Settings(task_queue=queue, fleet_url=lab_url, state_dir=state_dir)
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
    worker: Worker = new_worker(client, registry.activities(ctx), task_queue=queue)
    async with worker:
        yield Stack(client, fleet, lab_url, queue, settings, env)
    await fleet.aclose()


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    dev_env: WorkflowEnvironment, model_lab: LabThread, tmp_path: Any
) -> AsyncIterator[Stack]:
    """A worker on a fresh task queue running every workflow and activity against ``model_lab``."""
    async with open_stack(dev_env.client, model_lab.url, tmp_path, dev_env) as opened:
        yield opened


@pytest.fixture
def fleet_config() -> LabConfig:
    """The lab behind ``clock_stack``: the default, routed to the nearest region."""
    return lab_config(initial_routing="nearest")


@pytest_asyncio.fixture(loop_scope="session")
async def clock_stack(
    time_env: WorkflowEnvironment, fleet_config: LabConfig, tmp_path: Any
) -> AsyncIterator[Stack]:
    """Every workflow and activity on the time-skipping server, against a MemoryFleet (faults
    on, so a test can make a gate fail) whose time is the workflows'."""
    fleet = MemoryFleet(fleet_config, faults=True)
    queue = f"test-{uuid.uuid4().hex[:10]}"
    settings = Settings(task_queue=queue, fleet_url=URL, state_dir=tmp_path)
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=time_env.client)
    worker: Worker = new_worker(time_env.client, registry.activities(ctx), task_queue=queue)
    async with worker:
        yield Stack(time_env.client, fleet, URL, queue, settings, time_env)
    await fleet.aclose()
