"""A load test works on the stack a user has: no rebalancer at all, or one that has not
yet had a trusted view of the fleet. Real dev server, model lab."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.load_test import LoadTestActivities, routing_difference
from orchestrator.activities.overrides import OverrideActivities
from orchestrator.activities.rebalance import RebalanceActivities
from orchestrator.activities.rebalancer_recovery import RebalancerRecoveryActivities
from orchestrator.contracts.rebalancer import RebalancerInput
from orchestrator.fleet.http import HttpFleet
from orchestrator.models import HealthReport
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import new_worker
from tests.workflows.test_load_test import Rig, progress_of, start, until
from workflows.rebalancer import TrafficRebalanceWorkflow


class BlindFleet(HttpFleet):
    """While ``blind``, health reports no samples from one region (a stalled scrape)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.blind = True

    async def health(self, window_s: float | None = None) -> HealthReport:
        report = await super().health(window_s)
        if not self.blind:
            return report
        return report.model_copy(
            update={
                "regions": [r for r in report.regions if r.region != "us-west"],
                "services": [s for s in report.services if s.region != "us-west"],
            }
        )


def worker_activities(
    client: Client, fleet: HttpFleet, rebalancer_fleet: HttpFleet, rebalancer_id: str
) -> list[Callable[..., Any]]:
    overrides = OverrideActivities(client, rebalancer_id)
    rebalance = RebalanceActivities(rebalancer_fleet)
    load_test = LoadTestActivities(fleet)
    return [
        rebalance.plan_epoch,
        rebalance.publish,
        RebalancerRecoveryActivities(client).recover,
        overrides.request,
        overrides.release,
        overrides.status,
        overrides.writer,
        load_test.prepare,
        load_test.observe,
        load_test.check_routing,
        load_test.write_directly,
    ]


@pytest_asyncio.fixture
async def bare(
    dev_env: WorkflowEnvironment, start_lab: LabFactory
) -> AsyncIterator[tuple[Rig, BlindFleet]]:
    """A worker whose rebalancer id names no workflow yet (none has been started)."""
    lab = await start_lab(mode="model", faults=True)
    fleet = lab.fleet()
    blind = BlindFleet(lab.url)
    rebalancer_id = f"rebalancer-{uuid.uuid4().hex[:8]}"
    queue = f"test-{uuid.uuid4().hex[:10]}"
    activities = worker_activities(dev_env.client, fleet, blind, rebalancer_id)
    async with new_worker(dev_env.client, activities, task_queue=queue):
        handle = dev_env.client.get_workflow_handle(rebalancer_id)
        yield Rig(dev_env.client, fleet, lab, queue, handle), blind
    await blind.aclose()


class TestWithoutRebalancer:
    """With no rebalancer running there is nothing to pause and nobody to ask: the test
    writes its pins itself (If-Match, keyed per step) and puts back the exact table."""

    async def test_runs_and_restores_the_exact_table(self, bare: tuple[Rig, BlindFleet]) -> None:
        rig, _ = bare
        before = await rig.fleet.routing()
        handle = await start(rig)
        result = await handle.result()

        assert result.outcome == "stopped", result.reason
        assert result.writer == "direct" and result.steps >= 2
        pinned = [s for s in result.history if s.pin_share is not None]
        for step in pinned:
            assert abs(step.load / result.baseline.total_demand - step.pin_share) < 0.01
        assert result.routing_restored and "exactly" in result.routing_check
        assert routing_difference(await rig.fleet.routing(), before.fractions) < 1e-9
        writes = Counter(e.idempotency_key for e in await rig.fleet.audit() if e.kind == "routing")
        assert max(writes.values()) == 1
        assert sum(1 for key in writes if key.endswith("/restore")) == 1
        assert len(writes) == result.steps + 1


class TestBeforeTheFirstTrustedView:
    """Started while the rebalancer has no trusted view of the fleet yet, the test waits,
    saying so in its progress, and runs once the view comes; it never fails for it."""

    async def test_waits_visibly_then_runs(self, bare: tuple[Rig, BlindFleet]) -> None:
        rig, blind = bare
        rebalancer = await rig.client.start_workflow(
            TrafficRebalanceWorkflow.run,
            RebalancerInput(epoch_s=1.0, window_s=5),
            id=rig.rebalancer.id,
            task_queue=rig.queue,
        )
        try:
            handle = await start(rig)
            # The reason names the rebalancer's own: its epochs skip on a region's silence.
            waiting = await until(
                progress_of(handle),
                lambda p: p.phase == "waiting" and "no web samples" in p.last_reason,
                30,
            )
            assert "trusted view" in waiting.last_reason
            blind.blind = False
            result = await handle.result()
        finally:
            await rebalancer.terminate("test over")

        assert result.outcome == "stopped", result.reason
        assert result.writer == "rebalancer" and result.steps >= 2
        assert result.routing_restored, result.routing_check
