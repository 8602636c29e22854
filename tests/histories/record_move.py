"""Record a supervisor history with a planned move: ``python -m tests.histories.record_move``.

The ``move_job`` Update (issue 25) on a model-mode job: a move off its building, the
same request again, and a bad request the validator refuses. Written to
``tests/histories/training_move.json``; the replay test replays it with the others, so a
change to the move's commands must come behind ``workflow.patched``.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from temporalio.client import WorkflowUpdateFailedError

from orchestrator.clients.training import start_supervisor
from orchestrator.contracts.training_moves import MOVE_JOB_UPDATE, MoveJobRequest, MoveJobResult
from orchestrator.contracts.training_supervisor import SupervisorInput
from tests.histories.recording import recording_stack
from tests.workflows.training_support import JOB, training_config, wait_job

HERE = Path(__file__).parent


async def record() -> Path:
    async with recording_stack(training_config(step_ms=10.0, total_steps=600)) as rec:
        fleet = rec.fleet
        handle = await start_supervisor(
            rec.client,
            JOB,
            task_queue=rec.queue,
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


if __name__ == "__main__":
    print(f"wrote {asyncio.run(record())}")
