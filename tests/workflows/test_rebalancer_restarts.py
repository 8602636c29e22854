"""Restarts on either side of the routing writer: a new rebalancer run, a fleet that lost
its state. Real dev server (visibility, memos) and the model lab."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from orchestrator.clients.overrides import request_override
from orchestrator.contracts.rebalancer import RebalancerInput, RebalancerStatus, SetOverrideInput
from orchestrator.lab.server import LabThread, build_app
from orchestrator.models import RoutingTable
from tests.workflows.conftest import Stack, lab_config, open_stack
from tests.workflows.test_rebalancer import routing_writes, wait_status
from workflows.rebalancer import TrafficRebalanceWorkflow

DRAINED = "eu-west"


async def start(stack: Stack, wid: str) -> WorkflowHandle[Any, Any]:
    return await stack.client.start_workflow(
        TrafficRebalanceWorkflow.run,
        RebalancerInput(epoch_s=0.5, window_s=5),
        id=wid,
        task_queue=stack.task_queue,
    )


def drain_hold(region: str = DRAINED) -> SetOverrideInput:
    return SetOverrideInput(
        region=region, owner=f"runbook:{region}", reason="drain test", max_share=0.0
    )


def carried(table: RoutingTable, region: str) -> float:
    return max(shares.get(region, 0.0) for shares in table.fractions.values())


def published(status: RebalancerStatus) -> bool:
    return any(e.outcome == "published" for e in status.epochs)


class TestKeysAcrossRuns:
    """A new run of the same rebalancer id publishes under keys of its own: the epoch
    numbers restart, the keys do not collide with the first run's in the fleet's record."""

    async def test_second_run_publishes(self, stack: Stack) -> None:
        wid = f"rebalancer-{uuid.uuid4().hex[:8]}"
        first = await start(stack, wid)
        await wait_status(first, published)
        await first.terminate("restarted by the test")
        # The lab still routes to the nearest region, so the new run's epoch 1 moves traffic.
        second = await start(stack, wid)
        status = await wait_status(second, published)

        assert (await second.describe()).status == WorkflowExecutionStatus.RUNNING
        assert "422" not in " ".join(e.reason for e in status.epochs)
        writes = routing_writes(await stack.fleet.audit())
        assert max(writes.values()) == 1
        assert any(second.result_run_id and second.result_run_id in key for key in writes)


class TestHoldsOutliveTheRun:
    """A drain's hold survives the rebalancer: a new run (after a failure, a terminate or
    stop/start) takes it over before its first epoch, so no traffic goes back into the
    drained region; a load test's hold whose test has ended is dropped, and said so."""

    async def test_new_run_takes_over_the_drain_hold(self, stack: Stack) -> None:
        wid = f"rebalancer-{uuid.uuid4().hex[:8]}"
        first = await start(stack, wid)
        await wait_status(first, lambda s: s.epoch >= 1 and s.trusted_view)
        await request_override(first, drain_hold())
        await request_override(
            first,
            SetOverrideInput(
                region="us-west",
                owner="loadtest:loadtest-long-gone",
                reason="test",
                capacity_fraction=1.0,
            ),
        )
        assert carried(await stack.fleet.routing(), DRAINED) == 0.0
        await first.terminate("the rebalancer died")

        second = await start(stack, wid)
        status = await wait_status(second, lambda s: s.epoch >= 3)

        assert [(o.region, o.owner, o.max_share) for o in status.overrides] == [
            (DRAINED, f"runbook:{DRAINED}", 0.0)
        ]
        assert first.result_run_id and first.result_run_id in status.recovery_note
        assert "loadtest:loadtest-long-gone" in status.recovery_note
        assert "ended" in status.recovery_note
        assert carried(await stack.fleet.routing(), DRAINED) == 0.0
        assert all(e.shares.get(DRAINED, 0.0) == 0.0 for e in status.epochs)

    async def test_a_run_that_never_remembered_does_not_erase_the_holds(self, stack: Stack) -> None:
        wid = f"rebalancer-{uuid.uuid4().hex[:8]}"
        first = await start(stack, wid)
        await wait_status(first, lambda s: s.epoch >= 1 and s.trusted_view)
        await request_override(first, drain_hold())
        await first.terminate("the rebalancer died")
        # A run that ends before its first epoch (here: terminated while its start is
        # delayed) has no memo: it must not count as "a run that held nothing".
        never = await stack.client.start_workflow(
            TrafficRebalanceWorkflow.run,
            RebalancerInput(epoch_s=0.5, window_s=5),
            id=wid,
            task_queue=stack.task_queue,
            start_delay=timedelta(hours=1),
        )
        await never.terminate("died at once")

        third = await start(stack, wid)
        status = await wait_status(third, lambda s: s.epoch >= 2)
        assert [o.region for o in status.overrides] == [DRAINED]


@pytest.fixture
def restartable_lab() -> Iterator[list[LabThread]]:
    """A model lab that the test can kill and start again, empty, on the same port."""
    labs = [LabThread(build_app(lab_config(initial_routing="nearest"), mode="model")).start()]
    yield labs
    for lab in labs:
        lab.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def lab_stack(
    dev_env: WorkflowEnvironment, restartable_lab: list[LabThread], tmp_path: Any
) -> AsyncIterator[Stack]:
    async with open_stack(dev_env.client, restartable_lab[0].url, tmp_path) as opened:
        yield opened


class TestFleetThatLostItsState:
    """After the fleet restarts with its initial routing (the drained region carrying
    traffic again, the version back at 1), the rebalancer reports the regression and
    fixes the broken hold in one emergency step, without waiting on the ramp."""

    async def test_drained_region_emptied_again(
        self, lab_stack: Stack, restartable_lab: list[LabThread]
    ) -> None:
        handle = await start(lab_stack, f"rebalancer-{uuid.uuid4().hex[:8]}")
        await wait_status(handle, lambda s: s.epoch >= 1 and s.trusted_view)
        await request_override(handle, drain_hold())
        await wait_status(handle, lambda s: s.epoch >= 3)
        before = await lab_stack.fleet.routing()
        assert carried(before, DRAINED) == 0.0 and before.version > 1

        old = restartable_lab[0]
        old.stop()
        fresh = LabThread(
            build_app(lab_config(initial_routing="nearest"), mode="model"), port=old.port
        ).start()
        restartable_lab.append(fresh)
        lost = await lab_stack.fleet.routing()
        assert carried(lost, DRAINED) > 0.2 and lost.version < before.version

        status = await wait_status(
            handle, lambda s: any(e.emergency and e.outcome == "published" for e in s.epochs)
        )
        assert carried(await lab_stack.fleet.routing(), DRAINED) == 0.0
        assert status.incidents.routing_regressions >= 1
        emergency = [e for e in status.epochs if e.emergency]
        assert len(emergency) == 1 and status.incidents.emergency_steps == 1
        assert f"{DRAINED} carries" in emergency[0].emergency
        assert "emergency step" in status.incidents.last
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
