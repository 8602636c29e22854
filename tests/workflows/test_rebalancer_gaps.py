"""An override waits out a short gap in the fleet's health data instead of failing on it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.overrides import request_override
from orchestrator.config import Settings
from orchestrator.contracts.rebalancer import RebalancerInput, SetOverrideInput
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.server import LabThread
from orchestrator.models import HealthReport
from tests.fixtures.temporal import new_worker
from tests.workflows.test_rebalancer import wait_status
from workflows.rebalancer import URGENT_RETRIES, TrafficRebalanceWorkflow
from workflows.rebalancer_support import UNTRUSTED_RETRY_S

SILENT = "us-west"


class GappyFleet(HttpFleet):
    """The lab's fleet, except that the next ``gaps`` health reads lack one region's samples
    (what a stalled metrics pipeline or a region's scrape timing out looks like)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.gaps = 0

    async def health(self, window_s: float | None = None) -> HealthReport:
        report = await super().health(window_s)
        if self.gaps <= 0:
            return report
        self.gaps -= 1
        return report.model_copy(
            update={
                "regions": [r for r in report.regions if r.region != SILENT],
                "services": [s for s in report.services if s.region != SILENT],
            }
        )


@pytest_asyncio.fixture(loop_scope="session")
async def gappy(
    dev_env: WorkflowEnvironment, model_lab: LabThread, tmp_path: Any
) -> AsyncIterator[tuple[GappyFleet, WorkflowHandle[TrafficRebalanceWorkflow, None]]]:
    fleet = GappyFleet(model_lab.url)
    queue = f"test-{uuid.uuid4().hex[:10]}"
    settings = Settings(task_queue=queue, fleet_url=model_lab.url, state_dir=tmp_path)
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=dev_env.client)
    async with new_worker(dev_env.client, registry.activities(ctx), task_queue=queue):
        # Epochs far apart: every epoch after the first is one an override asked for.
        handle = await dev_env.client.start_workflow(
            TrafficRebalanceWorkflow.run,
            RebalancerInput(epoch_s=600, window_s=1),
            id=f"rebalancer-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        # Not ``s.epoch``: the counter moves when an epoch begins, its record lands when it ends.
        await wait_status(handle, lambda s: bool(s.epochs) and s.epochs[-1].outcome != "skipped")
        yield fleet, handle
        await handle.terminate("test over")
    await fleet.aclose()


def drain(region: str) -> SetOverrideInput:
    return SetOverrideInput(region=region, owner=f"drain-{region}", reason="test", max_share=0.0)


class TestUntrustedWindows:
    """A window in which a region reports nothing skips the epoch; an override waiting on it
    is tried again a window later, up to URGENT_RETRIES times, and refused only after that."""

    async def test_override_applies_after_a_short_gap(
        self, gappy: tuple[GappyFleet, WorkflowHandle[TrafficRebalanceWorkflow, None]]
    ) -> None:
        fleet, handle = gappy
        fleet.gaps = 2
        applied = await request_override(handle, drain("eu-west"))

        assert applied.region_share == pytest.approx(0.0, abs=1e-9)
        status = await handle.query(TrafficRebalanceWorkflow.status)
        skipped = [e for e in status.epochs if e.outcome == "skipped"]
        assert [e.reason.rsplit("(", 1)[-1] for e in skipped] == [
            f"override waits: retry 1 of {URGENT_RETRIES})",
            f"override waits: retry 2 of {URGENT_RETRIES})",
        ]
        assert all(f"region {SILENT}: no web samples" in e.reason for e in skipped)
        assert status.epochs[-1].outcome == "published"

    async def test_lasting_gap_refuses_and_withdraws_the_override(
        self, gappy: tuple[GappyFleet, WorkflowHandle[TrafficRebalanceWorkflow, None]]
    ) -> None:
        fleet, handle = gappy
        fleet.gaps = 100
        with pytest.raises(ApplicationError) as refused:
            await request_override(handle, drain("eu-west"))
        fleet.gaps = 0

        cause = refused.value
        assert cause.type == "Infeasible"
        assert f"region {SILENT}: no web samples" in cause.message
        status = await handle.query(TrafficRebalanceWorkflow.status)
        assert status.overrides == []
        urgent = [e for e in status.epochs if e.urgent]
        assert [e.outcome for e in urgent] == ["skipped"] * (URGENT_RETRIES + 1)


class TestFirstTrustedView:
    """A rebalancer whose first epoch cannot trust its inputs (started before every region
    served traffic) tries again a window later, not an epoch later (300 s by default, 600
    here): a drain started right after `rebalance start` gets its hold within seconds. With
    no window configured (the CLI's default), it tries again after UNTRUSTED_RETRY_S."""

    async def test_untrusted_first_epoch_is_retried_soon(
        self, dev_env: WorkflowEnvironment, model_lab: LabThread, tmp_path: Any
    ) -> None:
        fleet = GappyFleet(model_lab.url)
        fleet.gaps = 1
        queue = f"test-{uuid.uuid4().hex[:10]}"
        settings = Settings(task_queue=queue, fleet_url=model_lab.url, state_dir=tmp_path)
        ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=dev_env.client)
        async with new_worker(dev_env.client, registry.activities(ctx), task_queue=queue):
            handle = await dev_env.client.start_workflow(
                TrafficRebalanceWorkflow.run,
                RebalancerInput(epoch_s=600),
                id=f"rebalancer-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
            )
            try:
                # Not ``trusted_view``: the view is kept when the second epoch's plan comes
                # back, its record lands after the publish (h8: a query in between saw one
                # record and a trusted view).
                status = await wait_status(
                    handle, lambda s: len(s.epochs) >= 2, limit_s=UNTRUSTED_RETRY_S + 30
                )
                await request_override(handle, drain("eu-west"))
            finally:
                await handle.terminate("test over")
        await fleet.aclose()

        assert status.trusted_view
        first, second = status.epochs[0], status.epochs[1]
        assert first.outcome == "skipped" and f"region {SILENT}" in first.reason
        assert second.outcome != "skipped"
        gap = (second.at - first.at).total_seconds()
        assert UNTRUSTED_RETRY_S <= gap < 600, gap
