"""The lab's live traffic through a real HAProxy: routing, drains, capacity, isolation.

Each test starts its own data plane (a backend process per region, then HAProxy, in a
temp dir) and sends real HTTP requests to the PoP frontends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.lab.config import LabConfig
from orchestrator.lab.haproxy.backend import ROUTING_POLL_S
from orchestrator.lab.haproxy.config import server_maxconn
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.models import RegionHealth, RoutingTable, RoutingWrite, ServiceWeightChange
from orchestrator.policy.rebalance.buckets import bucket_of
from orchestrator.processes import group_alive

pytestmark = pytest.mark.server

BUCKETS = 1024


def lab_config(
    tiny_ms: float = 300, *, tiny: bool = True, p1_east_rtt_ms: float = 1, internal: bool = False
) -> LabConfig:
    """Two quick regions and (``tiny``) a tiny one, one slot and one queue place, to
    overflow: p2 sends all its users there. Without it, p2 is split like p1. Every PoP is
    1 ms from every region but p1 from east (``p1_east_rtt_ms``). ``internal``: a kv
    service no request calls, two kv shards per region, a batch job in east taking half
    its slots, stopped, a short numpy training job for east's hosts, and a second
    building in east."""
    quick = {"slots": 4, "service_time_ms": 10, "queue_limit": 16}
    cache = {"slots": 16, "service_time_ms": 1, "queue_limit": 64}
    regions: list[dict[str, Any]] = [
        {"name": "east", "buildings": ["e1"], "services": {"web": quick, "cache": cache}},
        {"name": "west", "buildings": ["w1"], "services": {"web": quick, "cache": cache}},
    ]
    rtt: dict[str, dict[str, float]] = {"east": {"west": 10}}
    if tiny:
        small = {"slots": 1, "service_time_ms": tiny_ms, "queue_limit": 1}
        regions.append(
            {"name": "tiny", "buildings": ["t1"], "services": {"web": small, "cache": cache}}
        )
        rtt = {"east": {"west": 10, "tiny": 10}, "west": {"tiny": 10}}
    names = [r["name"] for r in regions]
    services: list[dict[str, Any]] = [
        {"name": "web", "kind": "stateless", "depends_on": ["cache"], "demand_share": 1},
        {"name": "cache", "kind": "stateless"},
    ]
    extra: dict[str, Any] = {}
    if internal:
        services.append({"name": "kv", "kind": "stateful"})
        for region in regions:
            region["services"] = {**region["services"], "kv": cache}
        regions[0]["buildings"] = ["e1", "e2"]  # east can lose one building's power
        extra = {
            "shards": {"kv": dict.fromkeys(names, 2)},
            "batch_jobs": [{"name": "reindex", "region": "east", "slot_share": 0.5}],
            "training": {
                "hosts_per_building": 2,
                "spares_per_building": 0,
                "jobs": [
                    {
                        "name": "tiny-job",
                        "region": "east",
                        "hosts": 1,
                        "total_steps": 200,
                        "checkpoint_every": 10,
                        "step_ms": 20,
                    }
                ],
            },
        }
    return LabConfig.model_validate(
        {
            **extra,
            "bucket_count": BUCKETS,
            "services": services,
            "regions": regions,
            "inter_region_rtt_ms": rtt,
            "pops": [
                {
                    "name": p,
                    "demand_weight": 1,
                    "rtt_ms": {r: p1_east_rtt_ms if (p, r) == ("p1", "east") else 1 for r in names},
                }
                for p in ("p1", "p2")
            ],
            "initial_routing": {
                "p1": {"east": 0.5, "west": 0.5},
                "p2": {"tiny": 1.0} if tiny else {"east": 0.5, "west": 0.5},
            },
        }
    )


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[HAProxyDataPlane]:
    with HAProxyDataPlane(lab_config(), tmp_path) as running:
        yield running


async def edge(
    client: httpx.AsyncClient, plane: HAProxyDataPlane, pop: str, user: str
) -> httpx.Response:
    return await client.get(f"{plane.pop_url(pop)}/edge/{pop}", params={"user": user})


async def served(plane: HAProxyDataPlane, region: str) -> int:
    """Requests the region's backend process answered (HAProxy's 503s never reach it)."""
    async with httpx.AsyncClient(timeout=10) as client:
        rows = (await client.get(f"{plane.region_url(region)}/lab/served")).json()
    return sum(r["count"] for r in rows)


def of(table: RoutingTable, pop: str) -> list[str]:
    """The PoP's bucket -> region list (the adapter always answers buckets)."""
    assert table.buckets is not None
    return table.buckets[pop]


def users_routed(buckets: list[str], region: str, count: int) -> list[str]:
    found: list[str] = []
    i = 0
    while len(found) < count:
        user = f"user-{i}"
        if buckets[bucket_of(user, BUCKETS)] == region:
            found.append(user)
        i += 1
    return found


class TestPorts:
    """Every PoP frontend, region backend and the stats frontend gets a port of its own: two
    PoPs on one port would have HAProxy answer one PoP's users with the other's routing."""

    def test_every_listener_has_its_own_port(self, tmp_path: Path) -> None:
        # bound and closed one at a time, about 1 in 900 sets of six repeated a port here
        for attempt in range(10_000):
            layout = HAProxyDataPlane(lab_config(), tmp_path / str(attempt)).layout
            ports = [*layout.pop_ports.values(), *layout.region_ports.values(), layout.stats_port]
            assert len(set(ports)) == len(ports) == 2 + 3 + 1, ports


class TestBuckets:
    """HAProxy puts every user in the bucket bucket_of computes, and sends it to the region
    the live map names for that bucket."""

    async def test_haproxy_and_python_agree_on_every_user(self, plane: HAProxyDataPlane) -> None:
        table = await plane.fleet().routing()
        users = [f"user-{i}" for i in range(400)]
        users += ["a b", "a+b", "ünïcödé", "x" * 40, "semi;colon", "slash/ed", "%41"]
        seen: Counter[str] = Counter()
        async with httpx.AsyncClient(timeout=10) as client:
            for user in users:
                answer = await edge(client, plane, "p1", user)
                assert answer.status_code == 200, answer.text
                body = answer.json()
                assert body["bucket"] == bucket_of(user, BUCKETS), user
                assert body["region"] == of(table, "p1")[body["bucket"]], user
                seen[body["region"]] += 1
        assert set(seen) == {"east", "west"}

    async def test_requests_follow_a_routing_write(self, plane: HAProxyDataPlane) -> None:
        fleet = plane.fleet()
        before = await fleet.routing()
        write = RoutingWrite(fractions={"p1": {"west": 1.0}, "p2": {"tiny": 1.0}})
        after = await fleet.write_routing(
            write, if_match=before.version, idempotency_key="all-west"
        )
        assert set(of(after, "p1")) == {"west"}
        async with httpx.AsyncClient(timeout=10) as client:
            answers = [await edge(client, plane, "p1", f"user-{i}") for i in range(60)]
        assert {a.json()["region"] for a in answers} == {"west"}


class TestDrain:
    """A drained server (``set server web/east state drain``, the adapter's weight 0) gets
    no new request; its routed users are balanced over the other regions."""

    async def test_drained_region_gets_no_new_requests(self, plane: HAProxyDataPlane) -> None:
        fleet = plane.fleet()
        east_users = users_routed(of(await fleet.routing(), "p1"), "east", 20)
        drain = ServiceWeightChange(region="east", service="web", weight=0.0)
        result = await fleet.set_service_weight(drain, idempotency_key="drain-east")
        assert result.detail["commands"] == ["set server web/east state drain"]
        before = await served(plane, "east")
        async with httpx.AsyncClient(timeout=10) as client:
            answers = [await edge(client, plane, "p1", u) for u in east_users]
        assert all(a.status_code == 200 for a in answers)
        assert {a.json()["routed"] for a in answers} == {"east"}
        assert "east" not in {a.json()["region"] for a in answers}
        assert await served(plane, "east") == before
        restore = ServiceWeightChange(region="east", service="web", weight=1.0)
        await fleet.set_service_weight(restore, idempotency_key="restore-east")
        async with httpx.AsyncClient(timeout=10) as client:
            back = [await edge(client, plane, "p1", u) for u in east_users]
        assert {a.json()["region"] for a in back} == {"east"}


class TestCapacity:
    """Past a server's maxconn and its queue, HAProxy itself answers 503."""

    async def test_full_queue_is_haproxys_503(self, tmp_path: Path) -> None:
        # a one-second hold: the burst's eight requests all arrive while the first is served
        with HAProxyDataPlane(lab_config(tiny_ms=1000), tmp_path) as plane:
            await self.burst(plane)

    async def burst(self, plane: HAProxyDataPlane) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            answers = await asyncio.gather(
                *(edge(client, plane, "p2", f"burst-{i}") for i in range(8))
            )
        codes = Counter(a.status_code for a in answers)
        # one connection (one slot, the 1 ms cache call inside it) and one queue place
        admitted = server_maxconn(plane.config, "tiny", "web") + 1
        assert admitted == 2
        assert codes[503] >= 8 - admitted
        assert codes[200] >= 1
        refused = [a for a in answers if a.status_code == 503]
        assert all("No server is available" in a.text for a in refused)
        assert await served(plane, "tiny") == codes[200]


class TestRtt:
    """A request pays its PoP's round trip to the routed region in HAProxy's frontend, before
    it is queued for a slot: the PoP's latency has it, the region's does not, and waiting
    requests do not wait for each other."""

    async def test_the_pop_pays_the_rtt_and_the_region_does_not(self, tmp_path: Path) -> None:
        rtt_ms, count = 250, 16
        with HAProxyDataPlane(lab_config(tiny=False, p1_east_rtt_ms=rtt_ms), tmp_path) as plane:
            users = users_routed(of(await plane.fleet().routing(), "p1"), "east", count)
            async with httpx.AsyncClient(timeout=30) as client:
                started = time.monotonic()
                answers = await asyncio.gather(*(edge(client, plane, "p1", u) for u in users))
                took = time.monotonic() - started
                view = (await client.get(f"{plane.region_url('east')}/lab/health")).json()
                text = (await client.get(f"{plane.region_url('east')}/metrics")).text
        assert [(a.status_code, a.json()["region"]) for a in answers] == [(200, "east")] * count
        assert took >= rtt_ms / 1000
        # one after another (a blocking sleep) would take count x 250 ms over HAProxy's
        # threads (at most 2 here): 2 s
        assert took < 1.0, took
        region = RegionHealth.model_validate(view["region"])
        assert region.samples == count and region.p99_ms is not None
        assert region.p99_ms < rtt_ms, region  # 10 ms service, 1 ms cache, 4 slots
        # every request of p1 took the RTT at least: none in the 0.25 s bucket or under
        assert f'lab_pop_request_duration_seconds_count{{pop="p1"}} {count}.0' in text
        assert 'lab_pop_request_duration_seconds_bucket{le="0.25",pop="p1"} 0.0' in text


class TestWarmth:
    """A region backend follows HAProxy's live map, as the Python lab follows its routing:
    a quiet bucket routed to it stays warm, and one moved to it is cold from the move for
    ``warm_after_s``, whether or not it is asked for meanwhile, whoever wrote the map."""

    async def test_warmth_follows_the_live_map(self, tmp_path: Path) -> None:
        config = lab_config(tiny=False)
        cold = config.cold.model_copy(
            update={"warm_after_s": 1.0, "warm_after_requests": 1000, "evict_after_s": 1.0}
        )
        with HAProxyDataPlane(config.model_copy(update={"cold": cold}), tmp_path) as plane:
            fleet = plane.fleet()
            before = await fleet.routing()
            first, second = users_routed(of(before, "p1"), "east", 2)
            assert bucket_of(first, BUCKETS) != bucket_of(second, BUCKETS)
            await asyncio.sleep(cold.evict_after_s + 2 * ROUTING_POLL_S)  # quiet, routed east
            async with httpx.AsyncClient(timeout=10) as client:
                quiet = (await edge(client, plane, "p1", first)).json()
                moved = RoutingWrite(fractions={"p1": {"west": 1.0}, "p2": {"east": 1.0}})
                await fleet.write_routing(moved, if_match=before.version, idempotency_key="w")
                arrived = (await edge(client, plane, "p1", first)).json()
                # past warm_after_s since west's backend read the move, never asked for
                await asyncio.sleep(cold.warm_after_s + 2 * ROUTING_POLL_S)
                later = (await edge(client, plane, "p1", second)).json()
        assert (quiet["region"], quiet["cold"]) == ("east", False)
        assert (arrived["region"], arrived["cold"]) == ("west", True)
        # warm from the move on: served without following the map it would be cold now
        assert (later["region"], later["cold"]) == ("west", False)


class TestIsolation:
    """A region's backend is its own process: a stopped one costs another region nothing."""

    async def test_sigstopped_region_costs_another_nothing(self, plane: HAProxyDataPlane) -> None:
        buckets = await plane.fleet().routing()
        east = users_routed(of(buckets, "p1"), "east", 3)
        west = users_routed(of(buckets, "p1"), "west", 40)
        stopped = plane.backends["east"].pid
        os.kill(stopped, signal.SIGSTOP)
        try:
            async with httpx.AsyncClient(timeout=30) as client:
                # requests stuck in the stopped region while the others are sent
                stuck = [asyncio.create_task(edge(client, plane, "p1", u)) for u in east]
                answers = [await edge(client, plane, "p1", u) for u in west]
                assert not any(t.done() for t in stuck)
                for task in stuck:
                    task.cancel()
                await asyncio.gather(*stuck, return_exceptions=True)
        finally:
            os.kill(stopped, signal.SIGCONT)
        assert [a.status_code for a in answers] == [200] * len(west)
        assert {a.json()["region"] for a in answers} == {"west"}


class TestStop:
    """Stopping the data plane leaves no HAProxy and no backend behind."""

    def test_stop_ends_every_process(self, tmp_path: Path) -> None:
        plane = HAProxyDataPlane(lab_config(), tmp_path).start()
        processes = [plane.haproxy, *plane.backends.values()]
        plane.stop()
        for process in processes:
            assert process is not None
            assert process.poll() is not None
            assert not group_alive(process.pid)
