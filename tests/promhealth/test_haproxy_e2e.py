"""The rebalancer and a live load test on Temporal, steering the HAProxy lab, with every
health number read as PromQL (haproxy-lab-queries.yaml) from a real Prometheus scraping
HAProxy's exporter and the region backends; the worker's fleet comes from the settings
(``ORCHESTRATOR_HEALTH=prometheus``). Routing writes go through the lab's fleet API to
HAProxy's map, and real requests through the PoP frontends follow them.

The lab: two regions whose web pool holds 50 rps (2 slots, 40 ms), every user routed to
east, and 60 rps offered; east overflows (HAProxy refuses the excess itself, which the
queries count as east's load), so the rebalancer must move users to west. Then, the
rebalancer stopped so that its lag cannot move west's baseline, a load test pins west's share
up itself until a metric reaches NOMORE (west's utilization past 75%, or its error rate once
bursts overflow the queue), and puts the routing back.

Each pool queues 10 requests a slot (``haproxy_rig.QUEUE_PER_SLOT``: with 2, a hogged run's
west refused 8% of its baseline and the load test rightly stopped before its first step).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.load_test import routing_difference
from orchestrator.clients.rebalancer import stop_rebalancer
from orchestrator.contracts.load_test import LoadTestInput
from orchestrator.contracts.rebalancer import RebalancerInput, RebalancerStatus, StopInput
from orchestrator.models import RoutingWrite
from orchestrator.waiting import wait_until_async
from testkit.haproxy import settled_routing
from tests.lab.haproxy.test_data_plane import of
from tests.promhealth.haproxy_rig import Rig, lab_config, open_rig, queries
from workflows.load_test import LiveLoadTestWorkflow
from workflows.rebalancer import TrafficRebalanceWorkflow

pytestmark = pytest.mark.server  # HAProxy, backends, Prometheus and the Temporal dev server

OFFERED_RPS = 60.0
#: the load test's window, and the backends' utilization window
LOAD_WINDOW_S = 3.0


async def until_status(
    handle: Any, predicate: Callable[[RebalancerStatus], bool], within_s: float
) -> RebalancerStatus:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        status: RebalancerStatus = await handle.query(TrafficRebalanceWorkflow.status)
        if predicate(status):
            return status
        if loop.time() > deadline:
            pytest.fail(f"not reached within {within_s:g}s; last epochs: {status.epochs[-4:]}")
        await asyncio.sleep(0.2)


async def steady(rig: Rig, region: str, rps: float, within_s: float = 60.0) -> None:
    """Wait until the health source reads ``region`` serving ``rps`` (within 25%) in two
    reads in a row, a window apart. One window's sleep after the routing write was not
    enough under a hogged CPU: the load test's baseline read west at 3.0 of the ~15 rps
    the new table sent it (h4, d1cc0e6), and the test ran to max_load while healthy."""
    readings: list[float | None] = []

    async def settled() -> bool:
        health = await rig.fleet.health(LOAD_WINDOW_S)
        readings.append(next((r.rps for r in health.regions if r.region == region), None))
        near = [x is not None and abs(x - rps) <= 0.25 * rps for x in readings[-2:]]
        return len(near) == 2 and all(near)

    if not await wait_until_async(settled, timeout_s=within_s, interval_s=LOAD_WINDOW_S):
        raise AssertionError(f"{region} never read {rps:g} rps twice in a row: {readings[-6:]}")


async def test_rebalancer_and_load_test_read_promql(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    config = lab_config(2, {"p1": {"east": 1.0}, "p2": {"east": 1.0}}, LOAD_WINDOW_S)
    async with open_rig(dev_env.client, tmp_path, config, OFFERED_RPS) as rig:
        await rebalance_then_load_test(rig)


async def rebalance_then_load_test(rig: Rig) -> None:
    before = await rig.fleet.routing()
    assert set(of(before, "p1")) == {"east"}
    handle = await rig.client.start_workflow(
        TrafficRebalanceWorkflow.run,
        RebalancerInput(epoch_s=0.5, window_s=5),
        id=rig.rebalancer_id,
        task_queue=rig.queue,
    )
    try:
        # epochs that read east saturated (from PromQL) and moved users to west in the map
        status = await until_status(handle, lambda s: s.shares.get("west", 0.0) >= 0.15, 90)
        published = [e for e in status.epochs if e.outcome == "published"]
        assert max(e.max_utilization_before or 0.0 for e in published) > 0.5, published
        table = await settled_routing(rig.plane.fleet())  # HAProxy's live map, not the fleet API
        assert table.version > before.version
        moved = [r for p in ("p1", "p2") for r in of(table, p)].count("west") / (2 * 1024)
        assert moved >= 0.1, moved
        async with httpx.AsyncClient(timeout=10) as client:
            answers = [
                await client.get(f"{rig.plane.pop_url('p1')}/edge/p1", params={"user": f"u-{i}"})
                for i in range(0, 400, 2)
            ]
        assert "west" in {a.json().get("region") for a in answers if a.status_code == 200}
    finally:
        # a stop, not a terminate: the epoch in flight lands first, so the write below
        # (If-Match on the table read after the stop) meets no later publish
        stop = StopInput(by="test", reason="rebalance checked")
        assert await stop_rebalancer(handle, stop, timeout_s=60)

    # With the rebalancer gone the load test writes its pins itself (its lag would move
    # west's baseline under the test). West carries a quarter of the demand to start with.
    quarter = RoutingWrite(fractions={"p1": {"east": 0.5, "west": 0.5}, "p2": {"east": 1.0}})
    table = await rig.fleet.routing()
    found = await rig.fleet.write_routing(
        quarter, if_match=table.version, idempotency_key="after-rebalancer"
    )
    await steady(rig, "west", OFFERED_RPS / 4)  # the baseline must be the new table's
    result = await rig.client.execute_workflow(
        LiveLoadTestWorkflow.run,
        LoadTestInput(
            region="west",
            p99_slo_ms=2000.0,
            max_error_rate=0.05,
            max_utilization=0.75,
            window_s=LOAD_WINDOW_S,
            settle_s=1.0,
        ),
        id=f"loadtest-west-{uuid.uuid4().hex[:6]}",
        task_queue=rig.queue,
    )
    steps = [(s.load, s.pin_share, s.band, s.decision) for s in result.history]
    assert result.outcome in ("stopped", "backoff"), (result.reason, steps)
    assert result.steps >= 1 and result.load_reached > result.baseline.region_load, steps
    assert result.bottleneck_key in ("utilization", "error_rate"), result.bottleneck_key
    assert result.routing_restored, result.reason
    assert result.routing_max_difference == 0.0
    assert routing_difference(await settled_routing(rig.plane.fleet()), found.fractions) == 0.0
    # every health number came through PromQL: HAProxy's counters and the backends' series
    asked = queries(rig.query_log)
    assert any("haproxy_server_sessions_total" in q for q in asked)
    assert any("haproxy_frontend_http_requests_total" in q for q in asked)
    assert any("lab_service_request_duration_seconds_bucket" in q for q in asked)
    assert any("lab_service_utilization" in q for q in asked)
