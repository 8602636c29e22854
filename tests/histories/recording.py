"""What a history recorder runs on: a fresh dev server, a model-mode lab, a worker."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.devserver import DevServer
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import LabConfig
from tests.fixtures.lab import RunningLab, launch_lab
from tests.fixtures.ports import free_port
from tests.fixtures.temporal import new_worker


@dataclass
class Recording:
    client: Client
    fleet: HttpFleet
    queue: str
    lab: RunningLab


@contextlib.asynccontextmanager
async def recording_stack(
    config: LabConfig, fleet_type: type[HttpFleet] = HttpFleet
) -> AsyncIterator[Recording]:
    """A dev server on a temporary SQLite file, ``config``'s lab in model mode with faults,
    and the production activities on a worker of a fresh task queue; all stopped after."""
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(port=free_port(), ui=False, db_file=Path(tmp) / "t.db")
        await asyncio.to_thread(server.start, timeout_s=60.0)
        lab = launch_lab(config, mode="model", faults=True)
        fleet = fleet_type(lab.url)
        try:
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            queue = f"record-{uuid.uuid4().hex[:8]}"
            settings = Settings(task_queue=queue, fleet_url=lab.url, state_dir=Path(tmp))
            ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
            async with new_worker(client, registry.activities(ctx), task_queue=queue):
                yield Recording(client=client, fleet=fleet, queue=queue, lab=lab)
        finally:
            await fleet.aclose()
            lab.stop()
            await asyncio.to_thread(server.stop)
