"""A drain runbook on Temporal steers the HAProxy lab: the rebalancer writes the map
through the lab's fleet API, the drain's gates and capacity check read HAProxy's counters,
its steps move every bucket off the region and drain its server, and real requests through
the PoP frontends follow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import RunbookReport
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from testkit.haproxy import settled_routing
from tests.lab.haproxy.serving import fleet_api
from tests.lab.haproxy.test_data_plane import lab_config, of
from tests.promhealth.haproxy_rig import traffic
from tests.workflows.conftest import Stack, open_stack
from tests.workflows.runbook.conftest import _start_rebalancer, runbook, start
from tests.workflows.test_rebalancer import wait_status

pytestmark = pytest.mark.server

DRAIN = """
name: haproxy-drain
kind: drain
parameters:
  region: {type: region}
tasks:
  - id: shift-traffic
    template: traffic_shift
    args: {region: "${params.region}", ratio: 0}
    steps: "2 x 50%"
    wait: 0.5
    gates: ["error_rate in others-of(${params.region}) <= 0.05"]
  - id: web-off
    template: service_weight
    depends_on: [shift-traffic]
    args: {region: "${params.region}", service: web, weight: 0}
"""


@pytest.fixture
def lab_url(tmp_path: Path) -> Iterator[tuple[str, HAProxyDataPlane]]:
    """The HAProxy lab (no tiny region in the path) and its fleet API in a thread."""
    with HAProxyDataPlane(lab_config(tiny=False), tmp_path) as plane, fleet_api(plane) as url:
        yield url, plane


@pytest_asyncio.fixture(loop_scope="session")
async def haproxy_stack(
    dev_env: WorkflowEnvironment, lab_url: tuple[str, HAProxyDataPlane], tmp_path: Path
) -> AsyncIterator[Stack]:
    async with open_stack(dev_env.client, lab_url[0], tmp_path, dev_env) as opened:
        yield opened


#: requests/s through the two PoPs while the drain runs: the gates need numbers to read
RPS = 40.0


class TestDrainRunbook:
    """The drain moves every bucket off the region, then drains its server; afterwards no
    request through HAProxy reaches it."""

    async def test_drain_through_haproxy(
        self, haproxy_stack: Stack, lab_url: tuple[str, HAProxyDataPlane], tmp_path: Path
    ) -> None:
        plane = lab_url[1]
        # from a process of its own: a sender on this loop falls silent while the worker
        # beside it holds the GIL, then bursts (measured: tests/promhealth/traffic_sender.py)
        async with traffic(plane, RPS, tmp_path / "traffic.log"):
            result = await self._drain(haproxy_stack)
        assert result.outcome == "completed", (result.outcome, result.events[-5:])
        table = await settled_routing(plane.fleet())
        assert "east" not in set(of(table, "p1")) | set(of(table, "p2")), (
            table.version,
            table.fractions,
            [(t.id, t.phase, t.message) for t in result.tasks],
            result.events,
        )
        assert (await plane.fleet().topology()).service_weights["east/web"] == 0.0
        async with httpx.AsyncClient(timeout=10) as client:
            answers = [
                await client.get(f"{plane.pop_url('p1')}/edge/p1", params={"user": f"a-{i}"})
                for i in range(40)
            ]
        assert all(a.status_code == 200 for a in answers)
        assert "east" not in {a.json()["region"] for a in answers}

    async def _drain(self, stack: Stack) -> RunbookReport:
        rebalancer = await _start_rebalancer(stack)
        try:
            # Traffic shifts are the rebalancer's overrides: it writes the map. Real traffic's
            # noise keeps it publishing small moves, so wait for its trusted view of the
            # fleet (overrides are refused before it), not for convergence.
            await wait_status(rebalancer, lambda s: s.trusted_view, limit_s=60.0)
            handle = await start(stack, runbook(DRAIN, region="east"))
            return await asyncio.wait_for(runbook_result(handle), timeout=120)
        finally:
            await rebalancer.terminate("test over")
