"""The HAProxy lab with traffic, a real Prometheus scraping it, and a Temporal worker whose
fleet reads health as PromQL, configured by the environment variables alone
(``ORCHESTRATOR_HEALTH=prometheus``, haproxy-lab-queries.yaml): the rig of the end-to-end
tests through HAProxy and Prometheus."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from orchestrator import registry
from orchestrator.config import load_settings
from orchestrator.contracts.rebalancer import REBALANCER_ID
from orchestrator.fleet.protocol import Fleet
from orchestrator.lab.config import LabConfig
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.promhealth import HAPROXY_LAB_QUERIES, fleet_from_settings
from testkit.temporal import new_worker
from tests.lab.haproxy.serving import fleet_api
from tests.triggers.servers import prometheus

__all__ = ["QUEUE_PER_SLOT", "Rig", "lab_config", "open_rig", "queries"]

#: queue places per slot of each web pool. With 2, a hogged run's Python backend stalled
#: long enough at 15 rps for HAProxy to refuse 8% of a region's requests (the load test
#: in test_haproxy_e2e then rightly stopped before its first step). HAProxy's queue
#: timeout grows with the places (twice their drain time: 160 ms for 2 slots and 4
#: places, 800 ms for 20), so with 10 a stall of up to 0.8 s queues instead of refusing;
#: a pool offered more than it serves still overflows.
QUEUE_PER_SLOT = 10
#: users cycled through: enough to cover every bucket of both PoPs many times
USERS = 4000


def lab_config(
    slots: int,
    routing: dict[str, dict[str, float]],
    window_s: float = 3.0,
) -> LabConfig:
    """Two regions whose web pool holds ``slots`` x 25 rps (40 ms a request) with
    :data:`QUEUE_PER_SLOT` queue places a slot, PoPs p1, p2. Moved buckets are served at full
    speed and the backends' utilization gauge covers ``window_s``, so a window's numbers
    are its own, not a cold start's or the last's."""
    web = {"slots": slots, "service_time_ms": 40, "queue_limit": QUEUE_PER_SLOT * slots}
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
            "initial_routing": routing,
            "cold": {"factor": 1.0},
            "metrics": {"window_s": window_s},
        }
    )


@dataclass
class Rig:
    client: Client
    fleet: Fleet
    plane: HAProxyDataPlane
    queue: str
    query_log: Path
    rebalancer_id: str = REBALANCER_ID


async def traffic(plane: HAProxyDataPlane, rps: float, stop: asyncio.Event) -> None:
    """``rps``, half per PoP, sent on a schedule whatever the answers take (an overloaded
    region must not slow the demand down)."""
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
            await asyncio.sleep(max(0.0, start + i / rps - loop.time()))
        await asyncio.gather(*pending, return_exceptions=True)


@contextlib.asynccontextmanager
async def open_rig(
    client: Client, tmp_path: Path, config: LabConfig, rps: float
) -> AsyncIterator[Rig]:
    """The lab under ``rps`` of traffic, Prometheus scraping it every second (its query log
    in ``Rig.query_log``), and a worker running every workflow and activity."""
    log = tmp_path / "queries.log"
    queue = f"haproxy-prom-{uuid.uuid4().hex[:8]}"
    with HAProxyDataPlane(config, tmp_path / "lab") as plane, fleet_api(plane) as lab:
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
            ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
            stop = asyncio.Event()
            sender = asyncio.create_task(traffic(plane, rps, stop))
            try:
                async with new_worker(client, registry.activities(ctx), task_queue=queue):
                    yield Rig(client, fleet, plane, queue, log)
            finally:
                stop.set()
                with contextlib.suppress(Exception):
                    await sender
                await fleet.aclose()


def queries(log: Path) -> list[str]:
    """Every query Prometheus answered, from its query log."""
    if not log.exists():
        return []
    return [json.loads(line)["params"]["query"] for line in log.read_text().splitlines() if line]
