"""Record a rebalancer stopped by ``request_stop``: ``python -m tests.histories.record_stop``.

The run publishes, takes a drain's override request, is asked to stop while that epoch's
publish is under way, and ends after it with the memo that says who stopped it. Written
to ``tests/histories/rebalancer_stopped.json``; the replay test replays it with the
others, so a change to the stop's commands must come behind ``workflow.patched``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from orchestrator.clients.overrides import request_override
from orchestrator.contracts.rebalancer import RebalancerInput, SetOverrideInput, StopInput
from orchestrator.lab.config import DemandConfig
from tests.histories.recording import recording_stack
from tests.workflows.test_rebalancer_stop import HeldPublishFleet
from tests.workflows.training_support import training_config
from workflows.rebalancer import TrafficRebalanceWorkflow

HERE = Path(__file__).parent


async def record() -> Path:
    config = training_config(step_ms=10.0, total_steps=300).model_copy(
        update={"initial_routing": "nearest", "demand": DemandConfig(total_rps=120.0)}
    )
    async with recording_stack(config, HeldPublishFleet) as rec:
        fleet = rec.fleet
        assert isinstance(fleet, HeldPublishFleet)
        handle = await rec.client.start_workflow(
            TrafficRebalanceWorkflow.run,
            RebalancerInput(epoch_s=0.5, window_s=1),
            id=f"rebalancer-{uuid.uuid4().hex[:8]}",
            task_queue=rec.queue,
        )
        fleet.hold = True
        drain = SetOverrideInput(region="eu-west", owner="record", reason="recorded", max_share=0.5)
        override = asyncio.create_task(request_override(handle, drain))
        await asyncio.wait_for(fleet.entered.wait(), 60)
        await handle.signal(
            TrafficRebalanceWorkflow.request_stop, StopInput(by="record", reason="recorded")
        )
        fleet.release.set()
        await asyncio.wait_for(handle.result(), 60)
        # applied, or refused by the stop if that epoch did not take it: either is a
        # history worth replaying
        await asyncio.wait_for(asyncio.gather(override, return_exceptions=True), 60)
        path = HERE / "rebalancer_stopped.json"
        path.write_text((await handle.fetch_history()).to_json())
        return path


if __name__ == "__main__":
    print(f"wrote {asyncio.run(record())}")
