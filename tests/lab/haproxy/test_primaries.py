"""kv primaries on the HAProxy data plane: a request whose shard's primary is in another
region pays the inter-region RTT, HAProxy's connection limit covers it (and follows a move of
primaries), and the slots a request holds are the backend's, so cold work is not admitted
past the pool's slots."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import LabConfig
from orchestrator.lab.haproxy import backend as backend_module
from orchestrator.lab.haproxy.backend import ROUTING_POLL_S, RegionBackend, create_backend_app
from orchestrator.lab.haproxy.config import (
    dependency_ms,
    poisson_quantile,
    primaries_of,
    server_maxconn,
    server_maxqueue,
)
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.models import ShardMove
from orchestrator.policy.rebalance.buckets import bucket_of
from tests.lab.haproxy.serving import fleet_api

RTT_MS = 120


def kv_lab(*, slots: int = 4, service_ms: float = 10, cold_factor: float = 1.0) -> LabConfig:
    """east and west, RTT_MS apart; web calls kv, whose two shards both start in east;
    every user of both PoPs is routed to west."""
    web = {"slots": slots, "service_time_ms": service_ms, "queue_limit": 4 * slots}
    kv = {"slots": 16, "service_time_ms": 2, "queue_limit": 64}
    return LabConfig.model_validate(
        {
            "bucket_count": 1024,
            "cold": {"factor": cold_factor, "warm_after_s": 600, "warm_after_requests": 10**6},
            "services": [
                {"name": "web", "kind": "stateless", "depends_on": ["kv"], "demand_share": 1},
                {"name": "kv", "kind": "stateful"},
            ],
            "regions": [
                {"name": "east", "buildings": ["e1"], "services": {"web": web, "kv": kv}},
                {"name": "west", "buildings": ["w1"], "services": {"web": web, "kv": kv}},
            ],
            "inter_region_rtt_ms": {"east": {"west": RTT_MS}},
            "shards": {"kv": {"east": 2}},
            "pops": [
                {"name": p, "demand_weight": 1, "rtt_ms": {"east": 1, "west": 1}}
                for p in ("p1", "p2")
            ],
            "initial_routing": {"p1": {"west": 1.0}, "p2": {"west": 1.0}},
        }
    )


def backend_client(backend: RegionBackend) -> httpx.AsyncClient:
    app = create_backend_app(backend)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://backend")


HEADERS = {"x-lab-pop": "p1", "x-lab-bucket": "3", "x-lab-routed": "west"}


class TestConnectionLimits:
    """maxconn holds the requests in dependency calls at capacity, a remote primary's RTT
    included, and changes when the primaries move; maxqueue is the pool's queue less what
    that room leaves the backend's wait for a slot."""

    def test_a_remote_primary_costs_its_rtt(self) -> None:
        config = kv_lab()
        assert dependency_ms(config, "east", "web") == 2  # both shards here
        assert dependency_ms(config, "west", "web") == RTT_MS + 2
        half = {**primaries_of(config), "kv-0001": "west"}
        assert dependency_ms(config, "west", "web", half) == RTT_MS / 2 + 2

    def test_maxconn_follows_the_primaries(self) -> None:
        config = kv_lab()  # web: 4 slots of 10 ms, 400 rps
        home = dict.fromkeys(primaries_of(config), "west")
        # room for the requests in kv calls at 400 rps, 999 times in 1,000
        assert server_maxconn(config, "west", "web") == 4 + poisson_quantile(400 * 0.122, 0.999)
        assert server_maxconn(config, "west", "web", home) == 4 + poisson_quantile(0.8, 0.999)
        assert server_maxconn(config, "east", "web") == server_maxconn(config, "west", "web", home)
        # the backend's wait for a slot holds 22 of the 16-place queue at the mean in-call
        # count (71 - 48.8), so HAProxy keeps one place: maxqueue 0 would be unlimited
        assert server_maxqueue(config, "west", "web") == 1
        assert server_maxqueue(config, "east", "web") == 16 - round(
            poisson_quantile(0.8, 0.999) - 0.8
        )


class SleepLog:
    """``asyncio`` as the backend module sees it, with every ``sleep`` recorded."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await asyncio.sleep(seconds)


class TestRegionBackend:
    """The backend sends a stateful call to the user's shard primary (the lab's state file
    says where), paying the RTT when it is elsewhere, and holds the front pool's slots."""

    def test_primaries_and_slots_follow_the_state_file(self, tmp_path: Path) -> None:
        backend = RegionBackend(kv_lab(), "west", set())
        users = [f"u{i}" for i in range(50)]
        assert {backend.primary_of("kv", u) for u in users} == {"east"}
        assert backend.primary_of("web", "u1") == "west"  # not stateful: here
        state = tmp_path / "beside.json"
        state.write_text(
            json.dumps({"primaries": {"kv-0000": "west"}, "slot_share": {"west": 0.5}})
        )
        backend.follow_beside(state)
        by_shard = {u: ["kv-0000", "kv-0001"][bucket_of(f"kv:{u}", 2)] for u in users}
        assert {u: backend.primary_of("kv", u) for u in users} == {
            u: "west" if shard == "kv-0000" else "east" for u, shard in by_shard.items()
        }
        assert backend.front_pools["web"].slots == 2
        state.write_text("{half a fi")  # a torn read keeps what is known
        backend.follow_beside(state)
        assert backend.front_pools["web"].slots == 2

    async def test_a_remote_primary_adds_the_rtt_to_the_request(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        sleeps = SleepLog()
        monkeypatch.setattr(backend_module, "asyncio", sleeps)

        async def took_s(region: str) -> tuple[float, list[float]]:
            sleeps.slept.clear()
            async with backend_client(RegionBackend(kv_lab(), region, set())) as http:
                started = time.monotonic()
                answer = await http.get("/edge/p1", params={"user": "u1"}, headers=HEADERS)
                assert answer.status_code == 200
                return time.monotonic() - started, list(sleeps.slept)

        (remote, remote_sleeps), (_, local_sleeps) = await took_s("west"), await took_s("east")
        # the kv call at the primary in east: the RTT and kv's 2 ms, slept as one
        assert (RTT_MS + 2) / 1000 in remote_sleeps
        assert remote >= (RTT_MS + 10) / 1000  # a floor, not a race
        # in east itself: web's 10 ms and kv's booked 2 ms, no RTT (what the backend
        # sleeps, not a wall time, which a loaded machine once stretched to 97 ms)
        assert local_sleeps and max(local_sleeps) <= 0.010

    async def test_cold_requests_wait_for_the_backends_slots(self) -> None:
        # one slot of 50 ms, cold 3x: three requests at once end after 150, 300, 450 ms
        config = kv_lab(slots=1, service_ms=50, cold_factor=3.0)
        backend = RegionBackend(config, "east", set())  # nothing warm here: every one cold
        async with backend_client(backend) as http:
            started = time.monotonic()

            async def one(user: str) -> float:
                answer = await http.get("/edge/p1", params={"user": user}, headers=HEADERS)
                assert answer.status_code == 200 and answer.json()["cold"] is True
                return time.monotonic() - started

            took = sorted(await asyncio.gather(*(one(f"u{i}") for i in range(3))))
        assert took[2] >= 0.45  # HAProxy's connections alone would have let all three hold at once


@pytest.mark.server
class TestThroughHAProxy:
    """Moving the primaries through the fleet API changes what users pay and what HAProxy
    admits, within a backend's poll of the lab's state."""

    async def test_moving_primaries_to_the_users_region(self, tmp_path: Path) -> None:
        config = kv_lab()
        with HAProxyDataPlane(config, tmp_path) as plane, fleet_api(plane) as url:
            async with httpx.AsyncClient(timeout=10) as client:

                async def median_ms() -> float:
                    took = []
                    for i in range(15):
                        started = time.monotonic()
                        answer = await client.get(
                            f"{plane.pop_url('p1')}/edge/p1", params={"user": f"u{i}"}
                        )
                        assert answer.status_code == 200, answer.text
                        took.append((time.monotonic() - started) * 1000)
                    return statistics.median(took)

                async def west_limit() -> int:
                    text = (await client.get(plane.metrics_url)).text
                    line = next(
                        x
                        for x in text.splitlines()
                        if x.startswith("haproxy_server_limit_sessions")
                        and 'proxy="web"' in x
                        and 'server="west"' in x
                    )
                    return int(float(line.rsplit(" ", 1)[1]))

                before, limit_before = await median_ms(), await west_limit()
                async with HttpFleet(url) as fleet:
                    shards = [s.id for s in (await fleet.topology()).shards]
                    await fleet.move_shards(
                        ShardMove(shards=shards, to_region="west"), idempotency_key="home"
                    )
                await asyncio.sleep(2 * ROUTING_POLL_S)
                after, limit_after = await median_ms(), await west_limit()
        assert before >= RTT_MS
        assert after < before - RTT_MS / 2
        assert limit_before == server_maxconn(config, "west", "web")
        home: dict[str, Any] = dict.fromkeys(shards, "west")
        assert limit_after == server_maxconn(config, "west", "web", home) < limit_before
