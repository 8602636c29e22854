"""Record a supervisor history with a move that found the job failed:
``python -m tests.histories.record_move_failed``.

The job's building loses power and a move off it comes before the watch loop's next poll
(a 5 s poll): the move defers to the watch loop's recovery (MOVE_DEFERS_TO_RECOVERY_PATCH)
and then answers ``not_needed``. Written to ``tests/histories/training_move_failed.json``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.clients.training import start_supervisor
from orchestrator.contracts.training_moves import (
    MOVE_JOB_UPDATE,
    MoveJobRequest,
    MoveJobResult,
    MoveOutcome,
)
from orchestrator.contracts.training_supervisor import SupervisorInput
from tests.histories.recording import recording_stack
from tests.workflows.training_support import JOB, inject, training_config, wait_job

HERE = Path(__file__).parent


async def record() -> Path:
    async with recording_stack(training_config(step_ms=10.0, total_steps=900)) as rec:
        handle = await start_supervisor(
            rec.client,
            JOB,
            task_queue=rec.queue,
            options=SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=5.0, confirm_poll_s=0.1),
        )
        job = await wait_job(rec.fleet, lambda j: (j.checkpoint_step or 0) >= 40)
        where = {h.name: h.building for h in (await rec.fleet.training_cluster()).hosts}
        await inject(rec.lab, "power-loss", building=where[job.hosts[0]])
        request = MoveJobRequest(
            avoid_buildings=[where[job.hosts[0]]], reason="recorded loss", request_id="rec-loss"
        )
        moved = await handle.execute_update(MOVE_JOB_UPDATE, request, result_type=MoveJobResult)
        assert moved.outcome is MoveOutcome.NOT_NEEDED, moved
        await handle.result()
        path = HERE / "training_move_failed.json"
        path.write_text((await handle.fetch_history()).to_json())
        return path


if __name__ == "__main__":
    print(f"wrote {asyncio.run(record())}")
