"""What benchmarks/drain_haproxy.py reads from HAProxy, against a real HAProxy: each
server's counters and the live routing map's changes, through the production runtime API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks._haproxy_watch import MapWatch, refusals
from orchestrator.fleet.haproxy.admin import adopt
from orchestrator.models import RoutingWrite
from orchestrator.waiting import wait_until_async
from testkit.haproxy import RunningHAProxy, region_servers, running_haproxy

pytestmark = pytest.mark.server

REGIONS = ("us-east", "eu-west")
BUCKETS = 64


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[RunningHAProxy]:
    with (
        region_servers(REGIONS) as servers,
        running_haproxy(
            tmp_path, pops=("edge-1",), regions=servers.ports, bucket_count=BUCKETS
        ) as running,
    ):
        yield running


async def test_refusals_count_each_web_server_s_requests(proxy: RunningHAProxy) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        answers = [
            await client.get(f"http://127.0.0.1:{proxy.service_ports['web']}/") for _ in range(20)
        ]
    assert all(a.status_code == 200 for a in answers)
    counters = await refusals(proxy.directory)
    assert set(counters) == {f"web/{r}" for r in REGIONS}
    by_region = {r: sum(1 for a in answers if a.text == r) for r in REGIONS}
    assert {k: v["stot"] for k, v in counters.items()} == {
        f"web/{r}": n for r, n in by_region.items()
    }
    assert all(v["econ"] == 0 and v["hrsp_5xx"] == 0 for v in counters.values())


async def test_map_watch_sees_a_routing_write(proxy: RunningHAProxy) -> None:
    fleet = proxy.fleet()
    await adopt(fleet)
    with MapWatch(proxy.directory, "us-east") as watch:
        assert await wait_until_async(lambda: bool(watch.changes), timeout_s=10)
        version = (await fleet.routing()).version
        written = time.time()
        await fleet.write_routing(
            RoutingWrite(fractions={"edge-1": {"eu-west": 1.0}}),
            if_match=version,
            idempotency_key="watch",
        )
        assert await wait_until_async(lambda: len(watch.changes) >= 2, timeout_s=10)
    assert [count for _, count in watch.changes] == [BUCKETS, 0]
    assert watch.changes[1][0] >= written


async def test_rebalance_counters_count_each_pop_s_answers(proxy: RunningHAProxy) -> None:
    """benchmarks/rebalance_haproxy.py's counters: a PoP's answers and 5xx from its frontend,
    each region's web 5xx from its server (none here)."""
    import asyncio

    from benchmarks.rebalance_haproxy import HAProxyCounters

    async with httpx.AsyncClient(timeout=10) as client:
        answers = [
            await client.get(
                f"http://127.0.0.1:{proxy.pop_ports['edge-1']}/", headers={"x-user": f"u-{i}"}
            )
            for i in range(12)
        ]
        answers.append(await client.get(f"http://127.0.0.1:{proxy.service_ports['web']}/"))
        counters = HAProxyCounters(proxy.directory, pops=["edge-1"])
        stop = asyncio.Event()
        poll = asyncio.create_task(counters.poll(client, stop))
        assert await wait_until_async(lambda: bool(counters.samples), timeout_s=10)
        stop.set()
        await poll
    assert all(a.status_code == 200 for a in answers)
    _, total, errors, europe = counters.samples[0]
    # the web-in frontend's answer is not a PoP's
    assert (total, errors, europe) == (12, 0, 0)
    assert counters.by_region[0][1] == dict.fromkeys(REGIONS, 0)
