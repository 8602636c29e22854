"""The HAProxy lab with traffic, a real Prometheus scraping it, and a Temporal worker whose
fleet reads health as PromQL, configured by the environment variables alone
(``ORCHESTRATOR_HEALTH=prometheus``, haproxy-lab-queries.yaml): the rig of the end-to-end
tests through HAProxy and Prometheus."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from orchestrator import registry
from orchestrator.config import load_settings
from orchestrator.contracts.rebalancer import REBALANCER_ID
from orchestrator.fleet.protocol import Fleet
from orchestrator.lab.config import LabConfig
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.processes import spawn, stop_group
from orchestrator.promhealth import HAPROXY_LAB_QUERIES, fleet_from_settings
from orchestrator.waiting import exited, wait_until_async
from testkit.temporal import new_worker
from tests.lab.haproxy.serving import fleet_api
from tests.promhealth.traffic_sender import READY
from tests.triggers.servers import prometheus

__all__ = ["QUEUE_PER_SLOT", "Rig", "lab_config", "observed", "open_rig", "queries"]

#: queue places per slot of each web pool. With 2, a hogged run's Python backend stalled
#: long enough at 15 rps for HAProxy to refuse 8% of a region's requests (the load test
#: in test_haproxy_e2e then rightly stopped before its first step). HAProxy's queue
#: timeout grows with the places (twice their drain time: 160 ms for 2 slots and 4
#: places, 800 ms for 20), so with 10 a stall of up to 0.8 s queues instead of refusing;
#: a pool offered more than it serves still overflows.
QUEUE_PER_SLOT = 10
#: users cycled through: enough to cover every bucket of both PoPs many times
USERS = 4000
#: the traffic's process (a script: it runs from any working directory)
SENDER = Path(__file__).with_name("traffic_sender.py")


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


@contextlib.asynccontextmanager
async def traffic(plane: HAProxyDataPlane, rps: float, log: Path) -> AsyncIterator[None]:
    """``rps``, half per PoP, from :mod:`.traffic_sender` in a process of its own (why: its
    docstring) until the block ends; its output goes to ``log``."""
    urls = [arg for pop in ("p1", "p2") for arg in ("--url", f"{plane.pop_url(pop)}/edge/{pop}")]
    args = [sys.executable, str(SENDER), "--rps", f"{rps:g}", "--users", str(USERS), *urls]
    with log.open("ab") as out:
        process = spawn(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        started = await wait_until_async(
            lambda: READY in log.read_text(),
            timeout_s=30,
            alive=exited(process, "the traffic sender"),
        )
        if not started:
            raise RuntimeError(f"the traffic sender did not start; see {log}")
        yield
    finally:
        stop_group(process, timeout_s=5.0)


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
            try:
                async with (
                    traffic(plane, rps, tmp_path / "traffic.log"),
                    new_worker(client, registry.activities(ctx), task_queue=queue),
                ):
                    yield Rig(client, fleet, plane, queue, log)
            finally:
                await fleet.aclose()


async def observed(fleet: Fleet, within_s: float = 60.0) -> None:
    """Wait until the health source has numbers for every pool of every region.

    A drain's capacity check rightly refuses while a pool has shown nothing ("no health
    data for cache in west"): right after the rig starts, a pool that few requests reach
    (a dependency at 20 rps) may have no series yet, or one sample, too few for a rate.
    """
    topology = await fleet.topology()
    pools = {(r.name, s) for r in topology.regions for s in r.capacity_rps}
    missing = set(pools)

    async def seen() -> bool:
        health = await fleet.health()
        # as the capacity check reads a pool: samples in the window, and a rate
        shown = {
            (h.region, h.service) for h in health.services if not h.missing and h.rps is not None
        }
        missing.clear()
        missing.update(pools - shown)
        return not missing

    if not await wait_until_async(seen, timeout_s=within_s, interval_s=1.0):
        raise AssertionError(f"no health data within {within_s:g} s for {sorted(missing)}")


def queries(log: Path) -> list[str]:
    """Every query Prometheus answered, from its query log."""
    if not log.exists():
        return []
    return [json.loads(line)["params"]["query"] for line in log.read_text().splitlines() if line]
