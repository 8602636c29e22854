"""A drain and its restore on Temporal against the HAProxy lab, with the rebalancer running,
every gate and pre-condition read as PromQL from a real Prometheus scraping HAProxy's
exporter and the region backends (the rig: tests/promhealth/haproxy_rig.py).

The drain moves every bucket of east through the map (the rebalancer's override) and drains
its web server; the restore puts the server back and returns east's users in steps gated on
east's own error rate and p99. Real requests through the PoP frontends follow each.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.rebalancer import RebalancerInput
from orchestrator.contracts.runbook import RunbookRunInput
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.runbook.spec import Runbook
from testkit.haproxy import settled_routing
from tests.lab.haproxy.test_data_plane import of
from tests.promhealth.haproxy_rig import Rig, lab_config, observed, open_rig, queries
from tests.workflows.runbook.conftest import runbook
from tests.workflows.test_rebalancer import wait_status
from workflows.rebalancer import TrafficRebalanceWorkflow
from workflows.runbook import RunbookWorkflow

pytestmark = pytest.mark.server  # HAProxy, backends, Prometheus and the Temporal dev server

#: both regions hold 100 rps: either carries all of it alone, with room for the Python
#: backends to run slow on a loaded machine (at 40 rps and a load of 8 on 2 cores, west
#: alone refused some of the requests sent to check it: a full queue, HAProxy's 503)
OFFERED_RPS = 20.0

DRAIN = """
name: haproxy-prom-drain
kind: drain
parameters:
  region: {type: region}
tasks:
  - id: shift-traffic
    template: traffic_shift
    args: {region: "${params.region}", ratio: 0}
    steps: "2 x 50%"
    wait: 1
    pre_conditions: ["utilization in others-of(${params.region}) < 0.75"]
    gates: ["error_rate in others-of(${params.region}) <= 0.05"]
  - id: web-off
    template: service_weight
    depends_on: [shift-traffic]
    args: {region: "${params.region}", service: web, weight: 0}
"""

RESTORE = """
name: haproxy-prom-restore
kind: restore
parameters:
  region: {type: region}
tasks:
  - id: web-on
    template: service_weight
    args: {region: "${params.region}", service: web, weight: 1}
  - id: shift-back
    template: traffic_shift
    depends_on: [web-on]
    args: {region: "${params.region}", ratio: 1}
    steps: "2 x 50%"
    wait: 1
    gates:
      - error_rate in ${params.region} <= 0.05
      - p99_ms of web in ${params.region} < 1000
"""


async def regions_reached(plane: HAProxyDataPlane, count: int = 100) -> set[str]:
    async with httpx.AsyncClient(timeout=10) as client:
        answers = [
            await client.get(f"{plane.pop_url('p1')}/edge/p1", params={"user": f"check-{i}"})
            for i in range(count)
        ]
    failed = [(a.status_code, a.text[:80]) for a in answers if a.status_code != 200]
    assert not failed, failed[:3]
    return {a.json()["region"] for a in answers}


async def test_drain_and_restore_read_promql(dev_env: WorkflowEnvironment, tmp_path: Path) -> None:
    config = lab_config(4, {p: {"east": 0.5, "west": 0.5} for p in ("p1", "p2")})
    async with open_rig(dev_env.client, tmp_path, config, OFFERED_RPS) as rig:
        rebalancer = await rig.client.start_workflow(
            TrafficRebalanceWorkflow.run,
            RebalancerInput(epoch_s=0.5, window_s=5),
            id=rig.rebalancer_id,
            task_queue=rig.queue,
        )
        try:
            # overrides are refused until the rebalancer trusts its (PromQL) view of the fleet
            await wait_status(rebalancer, lambda s: s.trusted_view, limit_s=60.0)
            await observed(rig.fleet)
            drain = await start(rig, runbook(DRAIN, region="east"))
            drained = await asyncio.wait_for(runbook_result(drain), timeout=120)
            assert drained.outcome == "completed", (drained.outcome, drained.events[-5:])
            table = await settled_routing(rig.plane.fleet())
            assert "east" not in set(of(table, "p1")) | set(of(table, "p2"))
            assert (await rig.plane.fleet().topology()).service_weights["east/web"] == 0.0
            assert await regions_reached(rig.plane) == {"west"}

            restore = await start(rig, runbook(RESTORE, region="east"))
            restored = await asyncio.wait_for(runbook_result(restore), timeout=120)
            assert restored.outcome == "completed", (restored.outcome, restored.events[-5:])
            table = await settled_routing(rig.plane.fleet())
            assert "east" in set(of(table, "p1")) and "east" in set(of(table, "p2"))
            assert (await rig.plane.fleet().topology()).service_weights["east/web"] == 1.0
            assert await regions_reached(rig.plane) == {"east", "west"}
        finally:
            await rebalancer.terminate("test over")
    # the gates' numbers came through PromQL: HAProxy's counters, the backends' series
    asked = queries(rig.query_log)
    assert any("haproxy_server_sessions_total" in q for q in asked)
    assert any("lab_service_request_duration_seconds_bucket" in q for q in asked)
    assert any("lab_region_utilization" in q for q in asked)


async def start(rig: Rig, rb: Runbook) -> WorkflowHandle[RunbookWorkflow, Any]:
    return await rig.client.start_workflow(
        RunbookWorkflow.run,
        RunbookRunInput(runbook=rb, requested_by="test"),
        id=f"{rb.name}-{uuid.uuid4().hex[:6]}",
        task_queue=rig.queue,
    )
