"""Record a supervisor history with a planned move: ``python -m tests.histories.record_move``.

The ``move_job`` Update (issue 25) on a model-mode job: a move off its building, the
same request again, and a bad request the validator refuses. Written to
``tests/histories/training_move.json``; the replay test replays it with the others, so a
change to the move's commands must come behind ``workflow.patched``.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import uuid
from pathlib import Path

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter

from orchestrator import registry
from orchestrator.clients.training import start_supervisor
from orchestrator.config import Settings
from orchestrator.contracts.training_moves import MOVE_JOB_UPDATE, MoveJobRequest, MoveJobResult
from orchestrator.contracts.training_supervisor import SupervisorInput
from orchestrator.devserver import DevServer
from orchestrator.fleet.http import HttpFleet
from tests.fixtures.lab import launch_lab
from tests.fixtures.ports import free_port
from tests.fixtures.temporal import new_worker
from tests.workflows.training_support import JOB, training_config, wait_job

HERE = Path(__file__).parent


async def record() -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(port=free_port(), ui=False, db_file=Path(tmp) / "t.db")
        await asyncio.to_thread(server.start, timeout_s=60.0)
        lab = launch_lab(training_config(step_ms=10.0, total_steps=600), mode="model", faults=True)
        fleet = HttpFleet(lab.url)
        try:
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            queue = f"record-{uuid.uuid4().hex[:8]}"
            settings = Settings(task_queue=queue, fleet_url=lab.url, state_dir=Path(tmp))
            ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
            async with new_worker(client, registry.activities(ctx), task_queue=queue):
                handle = await start_supervisor(
                    client,
                    JOB,
                    task_queue=queue,
                    options=SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1),
                )
                job = await wait_job(fleet, lambda j: j.step >= 50)
                where = {h.name: h.building for h in (await fleet.training_cluster()).hosts}
                with contextlib.suppress(WorkflowUpdateFailedError):
                    await handle.execute_update(
                        MOVE_JOB_UPDATE, MoveJobRequest(reason="no id"), result_type=MoveJobResult
                    )
                request = MoveJobRequest(
                    avoid_buildings=[where[job.hosts[0]]], reason="recorded", request_id="rec-1"
                )
                for update_id in ("move-1", "move-1-again"):
                    await handle.execute_update(
                        MOVE_JOB_UPDATE, request, id=update_id, result_type=MoveJobResult
                    )
                await handle.result()
                path = HERE / "training_move.json"
                path.write_text((await handle.fetch_history()).to_json())
                return path
        finally:
            await fleet.aclose()
            lab.stop()
            await asyncio.to_thread(server.stop)


if __name__ == "__main__":
    print(f"wrote {asyncio.run(record())}")
