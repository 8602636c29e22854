"""The rebalancer and a live load test on Temporal, steering the HAProxy lab, with every
health number read as PromQL (haproxy-lab-queries.yaml) from a real Prometheus scraping
HAProxy's exporter and the region backends; the worker's fleet comes from the settings
(``ORCHESTRATOR_HEALTH=prometheus``). Routing writes go through the lab's fleet API to
HAProxy's map, and real requests through the PoP frontends follow them.

The lab: two regions whose web pool holds 50 rps (2 slots, 40 ms), every user routed to
east, and 60 rps offered; east overflows (HAProxy refuses the excess itself, which the
queries count as east's load), so the rebalancer must move users to west. Then, the
rebalancer stopped so that its lag cannot move west's baseline, a load test pins west's share
up itself until a metric reaches NOMORE (measured: west's error rate, HAProxy refusing bursts
past 2 slots and 4 queue places, from about 35 rps of its 50), and puts the routing back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.load_test import LoadTestActivities, routing_difference
from orchestrator.activities.overrides import OverrideActivities
from orchestrator.activities.rebalance import RebalanceActivities
from orchestrator.activities.rebalancer_recovery import RebalancerRecoveryActivities
from orchestrator.config import load_settings
from orchestrator.contracts.load_test import LoadTestInput
from orchestrator.contracts.rebalancer import RebalancerInput, RebalancerStatus
from orchestrator.fleet.protocol import Fleet
from orchestrator.lab.config import LabConfig
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.models import RoutingWrite
from orchestrator.promhealth import HAPROXY_LAB_QUERIES, fleet_from_settings
from testkit.temporal import new_worker
from tests.lab.haproxy.serving import fleet_api
from tests.lab.haproxy.test_data_plane import of
from tests.triggers.servers import prometheus
from workflows.load_test import LiveLoadTestWorkflow
from workflows.rebalancer import TrafficRebalanceWorkflow

pytestmark = pytest.mark.server  # HAProxy, backends, Prometheus and the Temporal dev server

OFFERED_RPS = 60.0
#: the load test's window, and the backends' utilization window
LOAD_WINDOW_S = 3.0
#: users cycled through: enough to cover every bucket of both PoPs many times
USERS = 4000


def overflow_config() -> LabConfig:
    web = {"slots": 2, "service_time_ms": 40, "queue_limit": 4}
    cache = {"slots": 16, "service_time_ms": 1, "queue_limit": 64}
    return LabConfig.model_validate(
        {
            "bucket_count": 1024,
            "services": [
                {"name": "web", "kind": "stateless", "depends_on": ["cache"], "demand_share": 1},
                {"name": "cache", "kind": "stateless"},
            ],
            "regions": [
                {"name": n, "buildings": [f"{n}1"], "services": {"web": web, "cache": cache}}
                for n in ("east", "west")
            ],
            "inter_region_rtt_ms": {"east": {"west": 10}},
            "pops": [
                {"name": p, "demand_weight": 1, "rtt_ms": {"east": 1.0, "west": 1.0}}
                for p in ("p1", "p2")
            ],
            "initial_routing": {"p1": {"east": 1.0}, "p2": {"east": 1.0}},
            # moved buckets at full speed, and the backends' utilization gauge over the load
            # test's window: a step's utilization is its own, not a cold start's or the last's
            "cold": {"factor": 1.0},
            "metrics": {"window_s": LOAD_WINDOW_S},
        }
    )


@dataclass
class Rig:
    client: Client
    fleet: Fleet
    plane: HAProxyDataPlane
    queue: str
    query_log: Path
    rebalancer_id: str


async def traffic(plane: HAProxyDataPlane, stop: asyncio.Event) -> None:
    """OFFERED_RPS, half per PoP, sent on a schedule whatever the answers take (an
    overloaded region must not slow the demand down)."""
    pending: set[asyncio.Task[Any]] = set()
    async with httpx.AsyncClient(timeout=10, limits=httpx.Limits(max_connections=200)) as client:
        loop = asyncio.get_running_loop()
        start, i = loop.time(), 0
        while not stop.is_set():
            pop = ("p1", "p2")[i % 2]
            url = f"{plane.pop_url(pop)}/edge/{pop}"
            task = asyncio.create_task(client.get(url, params={"user": f"u-{i % USERS}"}))
            pending.add(task)
            task.add_done_callback(pending.discard)
            i += 1
            await asyncio.sleep(max(0.0, start + i / OFFERED_RPS - loop.time()))
        await asyncio.gather(*pending, return_exceptions=True)


@pytest_asyncio.fixture(loop_scope="session")
async def rig(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Rig]:
    """The lab with traffic, Prometheus scraping it, and a worker whose fleet's health is
    PromQL, configured by the environment variables alone."""
    log = tmp_path / "queries.log"
    queue = f"haproxy-prom-{uuid.uuid4().hex[:8]}"
    with (
        HAProxyDataPlane(overflow_config(), tmp_path / "lab") as plane,
        fleet_api(plane) as lab,
    ):
        targets = [t for group in plane.layout.scrape_targets().values() for t in group]
        async with prometheus(tmp_path, targets, query_log=log) as prom:
            settings = load_settings(
                {
                    "HOME": "/nonexistent",
                    "TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml",
                    "ORCHESTRATOR_FLEET_URL": lab,
                    "ORCHESTRATOR_HEALTH": "prometheus",
                    "ORCHESTRATOR_PROMETHEUS_URL": prom,
                    "ORCHESTRATOR_HEALTH_QUERIES": str(HAPROXY_LAB_QUERIES),
                    "ORCHESTRATOR_TASK_QUEUE": queue,
                    "ORCHESTRATOR_STATE_DIR": str(tmp_path / "state"),
                }
            )
            fleet = fleet_from_settings(settings)
            rebalancer_id = f"rebalancer-{uuid.uuid4().hex[:8]}"
            overrides = OverrideActivities(dev_env.client, rebalancer_id)
            rebalance = RebalanceActivities(fleet)
            load_test = LoadTestActivities(fleet)
            activities: list[Callable[..., Any]] = [
                rebalance.plan_epoch,
                rebalance.publish,
                RebalancerRecoveryActivities(dev_env.client).recover,
                overrides.request,
                overrides.release,
                overrides.status,
                overrides.writer,
                load_test.prepare,
                load_test.observe,
                load_test.check_routing,
                load_test.write_directly,
            ]
            stop = asyncio.Event()
            sender = asyncio.create_task(traffic(plane, stop))
            try:
                async with new_worker(dev_env.client, activities, task_queue=queue):
                    yield Rig(dev_env.client, fleet, plane, queue, log, rebalancer_id)
            finally:
                stop.set()
                with contextlib.suppress(Exception):
                    await sender
                await fleet.aclose()


def queries(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [json.loads(line)["params"]["query"] for line in log.read_text().splitlines() if line]


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


async def test_rebalancer_and_load_test_read_promql(rig: Rig) -> None:
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
        table = await rig.plane.fleet().routing()  # HAProxy's live map, not the fleet API
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
        await handle.terminate("rebalance checked")

    # With the rebalancer gone the load test writes its pins itself (its lag would move
    # west's baseline under the test). West carries a quarter of the demand to start with.
    table = await rig.fleet.routing()
    found = await rig.fleet.write_routing(
        RoutingWrite(fractions={"p1": {"east": 0.5, "west": 0.5}, "p2": {"east": 1.0}}),
        if_match=table.version,
        idempotency_key="quarter-west",
    )
    await asyncio.sleep(LOAD_WINDOW_S + 1)  # a window of the new table before the baseline
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
    assert routing_difference(await rig.plane.fleet().routing(), found.fractions) == 0.0
    # every health number came through PromQL: HAProxy's counters and the backends' series
    asked = queries(rig.query_log)
    assert any("haproxy_server_sessions_total" in q for q in asked)
    assert any("haproxy_frontend_http_requests_total" in q for q in asked)
    assert any("lab_service_request_duration_seconds_bucket" in q for q in asked)
    assert any("lab_service_utilization" in q for q in asked)
