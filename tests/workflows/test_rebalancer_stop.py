"""``request_stop`` (``orchestrator rebalance stop``) ends the rebalancer between epochs.

A terminate ends a run at once but not its running activity: an epoch's publish in flight
landed after it, between another writer's read and write (tests/promhealth/test_haproxy_e2e.py
met that as a 409). A stop lets the epoch finish, so nothing the run started lands after it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.overrides import request_override
from orchestrator.clients.rebalancer import stop_rebalancer
from orchestrator.config import Settings
from orchestrator.contracts.rebalancer import (
    STOPPED_MEMO,
    RebalancerInput,
    SetOverrideInput,
    StopInput,
)
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.server import LabThread
from orchestrator.models import RoutingTable, RoutingWrite
from tests.fixtures.temporal import new_worker
from tests.workflows.test_rebalancer import wait_status
from workflows.rebalancer import TrafficRebalanceWorkflow


class HeldPublishFleet(HttpFleet):
    """The lab's fleet, whose routing writes wait for ``release`` once ``hold`` is set."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.hold = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.writes = 0

    async def write_routing(
        self, write: RoutingWrite, *, if_match: int, idempotency_key: str
    ) -> RoutingTable:
        if self.hold:
            self.entered.set()
            await self.release.wait()
        table = await super().write_routing(
            write, if_match=if_match, idempotency_key=idempotency_key
        )
        self.writes += 1
        return table


def hold_on(region: str, max_share: float) -> SetOverrideInput:
    return SetOverrideInput(
        region=region, owner=f"test-{region}", reason="stop test", max_share=max_share
    )


class TestStopBetweenEpochs:
    """A stop during a publish waits for it: the run closes after the write, records it,
    refuses the request no epoch took, says in its memo who stopped it, and writes no more.
    A run that does not stop in time (no worker polls its queue) is terminated, and the
    caller is told so."""

    async def test_publish_in_flight_lands_before_the_run_closes(
        self, dev_env: WorkflowEnvironment, model_lab: LabThread, tmp_path: Any
    ) -> None:
        fleet = HeldPublishFleet(model_lab.url)
        queue = f"test-{uuid.uuid4().hex[:10]}"
        settings = Settings(task_queue=queue, fleet_url=model_lab.url, state_dir=tmp_path)
        ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=dev_env.client)
        async with new_worker(dev_env.client, registry.activities(ctx), task_queue=queue):
            handle = await dev_env.client.start_workflow(
                TrafficRebalanceWorkflow.run,
                RebalancerInput(epoch_s=0.5, window_s=1),
                id=f"rebalancer-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
            )
            await wait_status(handle, lambda s: any(e.outcome != "skipped" for e in s.epochs))
            fleet.hold = True
            first = asyncio.create_task(request_override(handle, hold_on("eu-west", 0.3)))
            await asyncio.wait_for(fleet.entered.wait(), 30)
            # taken while the publish is held: no epoch will settle it now
            second = asyncio.create_task(request_override(handle, hold_on("us-west", 0.5)))
            await asyncio.sleep(0.5)
            await handle.signal(TrafficRebalanceWorkflow.request_stop, StopInput(by="test"))
            await asyncio.sleep(1.0)
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING

            fleet.release.set()
            await asyncio.wait_for(handle.result(), 30)
            described = await handle.describe()
            assert described.status == WorkflowExecutionStatus.COMPLETED
            status = await handle.query(TrafficRebalanceWorkflow.status)
            routing = await fleet.routing()
            assert status.epochs[-1].outcome == "published"
            assert status.epochs[-1].version == routing.version
            assert (await described.memo())[STOPPED_MEMO]["version"] == routing.version

            applied = await asyncio.wait_for(first, 30)
            assert applied.version == routing.version
            with pytest.raises(ApplicationError, match="stopped by test"):
                await asyncio.wait_for(second, 30)
            writes = fleet.writes
            await asyncio.sleep(1.5)  # three epochs' worth
            assert fleet.writes == writes
            assert (await fleet.routing()).version == routing.version
        await fleet.aclose()

    async def test_a_run_no_worker_polls_is_terminated_after_the_timeout(
        self, dev_env: WorkflowEnvironment
    ) -> None:
        handle = await dev_env.client.start_workflow(
            TrafficRebalanceWorkflow.run,
            RebalancerInput(epoch_s=0.5, window_s=1),
            id=f"rebalancer-{uuid.uuid4().hex[:8]}",
            task_queue=f"nobody-{uuid.uuid4().hex[:10]}",
        )
        stop = StopInput(by="test", reason="no worker")
        assert await stop_rebalancer(handle, stop, timeout_s=1.0) is False
        described = await handle.describe()
        assert described.status == WorkflowExecutionStatus.TERMINATED
