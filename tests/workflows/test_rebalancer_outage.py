"""The single routing writer outlives a fleet outage longer than its retry budget.

On the time-skipping server: the fleet refuses every call for ten minutes of workflow
time (each epoch's activity exhausts its ten attempts), and the rebalancer skips those
epochs, saying why and counting them, then publishes again once the fleet is back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from temporalio import activity
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.rebalance import RebalanceActivities
from orchestrator.activities.rebalancer_recovery import RecoveredHolds, RecoverHoldsInput
from orchestrator.contracts.rebalancer import RebalancerInput, RebalancerStatus, SetOverrideInput
from orchestrator.exceptions import FleetUnavailable
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.server import LabThread
from orchestrator.models import HealthReport, RoutingTable, Topology
from tests.fixtures.temporal import new_worker, skip_time, start_time_skipping
from workflows.rebalancer import TrafficRebalanceWorkflow

EPOCH_S = 30.0


class DownFleet(HttpFleet):
    """The lab's fleet, except that while ``down`` every read fails as a dead API would."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.down = False
        self.refused = 0

    def _gate(self) -> None:
        if self.down:
            self.refused += 1
            raise FleetUnavailable("GET /v1: connection refused", reason="ConnectError")

    async def topology(self) -> Topology:
        self._gate()
        return await super().topology()

    async def routing(self, *, include_buckets: bool | None = None) -> RoutingTable:
        self._gate()
        return await super().routing(include_buckets=include_buckets)

    async def health(self, window_s: float | None = None) -> HealthReport:
        self._gate()
        return await super().health(window_s)


@activity.defn(name="recover_rebalancer_holds")
async def no_earlier_run(_inp: RecoverHoldsInput) -> RecoveredHolds:
    """The time-skipping server has no visibility store to search: nothing to take over."""
    return RecoveredHolds()


@pytest_asyncio.fixture(loop_scope="session")
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server per test, not the module's shared one. In a hogged run
    (h3, 0422e62) the second test's Trail showed the server's clock moving at real speed,
    30 s per 30 s skip, with the activity's retry backoffs (2, 4, 8, 15 s) taken in real
    time: a time-skipping lock held with nothing to wait for, as the Java test server
    leaks one around activity retry timers and timeouts (sdk-java #593's review,
    #2246; open fix #3092). Nothing here releases a leaked lock; a fresh server keeps
    one test's leak from slowing the next, and this module has the suite's most retries."""
    env = await start_time_skipping()
    try:
        yield env
    finally:
        await env.shutdown()


@pytest_asyncio.fixture(loop_scope="session")
async def outage(
    time_env: WorkflowEnvironment, model_lab: LabThread
) -> AsyncIterator[tuple[DownFleet, WorkflowHandle[Any, Any]]]:
    fleet = DownFleet(model_lab.url)
    rebalance = RebalanceActivities(fleet)
    worker = new_worker(time_env.client, [rebalance.plan_epoch, rebalance.publish, no_earlier_run])
    async with worker:
        handle = await time_env.client.start_workflow(
            TrafficRebalanceWorkflow.run,
            RebalancerInput(epoch_s=EPOCH_S, window_s=5),
            id=f"rebalancer-{uuid.uuid4().hex[:8]}",
            task_queue=worker.task_queue,
        )
        yield fleet, handle
        await handle.terminate("test over")
    await fleet.aclose()


async def status_after(
    env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], seconds: float
) -> RebalancerStatus:
    await skip_time(env, seconds)
    status: RebalancerStatus = await handle.query(TrafficRebalanceWorkflow.status)
    return status


#: real seconds the override's refusal may take; it takes well under one on a quiet machine
STALL_S = 120.0


class Trail:
    """What the server's clock and the rebalancer's pending activity did, for a stall's
    failure message: once (hogged make test, 12ab6a9) the test's 30 s skips stopped
    advancing anything after the fourth attempt of an epoch, until pytest-timeout's 300 s."""

    def __init__(self, env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any]) -> None:
        self._env, self._handle = env, handle
        self._started = time.monotonic()
        self.notes: list[str] = []

    @property
    def real_s(self) -> float:
        return time.monotonic() - self._started

    async def note(self) -> None:
        now = await self._env.get_current_time()
        described = await self._handle.describe()
        pending = [
            f"{a.activity_type.name}#{a.attempt} {PendingActivityState.Name(a.state)}"
            for a in described.raw_description.pending_activities
        ]
        self.notes.append(f"real {self.real_s:.1f}s server {now:%H:%M:%S} pending {pending}")

    def __str__(self) -> str:
        return "; ".join(self.notes[-8:])


class TestFleetOutage:
    """Every epoch during the outage is skipped with the cause; none fails the workflow. An
    override asked for during it waits a few retries, then is refused with the cause."""

    async def test_skips_through_outage_and_publishes_after(
        self,
        time_env: WorkflowEnvironment,
        outage: tuple[DownFleet, WorkflowHandle[Any, Any]],
    ) -> None:
        fleet, handle = outage
        before = await status_after(time_env, handle, 1)
        assert before.epoch >= 1 and before.epochs[-1].outcome == "published"

        fleet.down = True
        during = await status_after(time_env, handle, 600)
        fleet.down = False
        # Ten attempts per epoch, every one refused: far beyond the retry budget.
        assert fleet.refused >= 20
        skipped = [e for e in during.epochs if e.epoch > before.epoch]
        assert skipped and all(e.outcome == "skipped" for e in skipped)
        assert all("fleet unreachable" in e.reason for e in skipped)
        assert all("connection refused" in e.reason for e in skipped)
        assert during.incidents.unreachable_epochs == len(skipped)
        assert "connection refused" in during.incidents.last

        after = await status_after(time_env, handle, 2 * EPOCH_S + 120)
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        assert after.epochs[-1].outcome in ("published", "unchanged")
        assert after.epochs[-1].reason == "" or "unreachable" not in after.epochs[-1].reason

    async def test_override_during_outage_is_refused_with_the_cause(
        self,
        time_env: WorkflowEnvironment,
        outage: tuple[DownFleet, WorkflowHandle[Any, Any]],
    ) -> None:
        fleet, handle = outage
        while not (await status_after(time_env, handle, 1)).trusted_view:
            pass
        fleet.down = True
        # The signal and the query, not orchestrator.clients.overrides: its real-time polls
        # would race this server's skipped time.
        ticket = f"outage-{uuid.uuid4().hex[:6]}"
        await handle.signal(
            TrafficRebalanceWorkflow.request_override,
            SetOverrideInput(
                region="eu-west", owner="runbook:eu-west", max_share=0.0, ticket=ticket
            ),
        )
        trail = Trail(time_env, handle)
        while True:
            found = await handle.query(TrafficRebalanceWorkflow.override_ticket, ticket)
            if found.outcome not in ("pending", "unknown"):
                break
            await trail.note()
            assert trail.real_s < STALL_S, f"ticket still {found.outcome}: {trail}"
            await skip_time(time_env, 30)
        fleet.down = False

        assert found.outcome == "failed" and found.error_type == "Infeasible"
        cause = ApplicationError(found.error, type=found.error_type)
        assert "fleet unreachable" in cause.message and "connection refused" in cause.message
        status = await handle.query(TrafficRebalanceWorkflow.status)
        assert status.overrides == []
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
