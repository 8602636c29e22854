"""The HAProxy fleet against a real HAProxy (2.6, Debian's), real sockets, real traffic.

Each test starts its own HAProxy from files in a temp dir (tests/... share the builder
with the benchmark: testkit/haproxy.py) in front of tiny per-region HTTP servers.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.exceptions import (
    FleetRejected,
    FleetUnavailable,
    ProxyStateLost,
    VersionConflict,
)
from orchestrator.fleet.haproxy import HAProxyFleet, RuntimeApi, load_topology
from orchestrator.fleet.haproxy.admin import adopt, check
from orchestrator.fleet.haproxy.state import WRITING_KEY, parse_map, writer_tag
from orchestrator.models import RoutingWrite, ServiceWeightChange, ShardMove
from testkit.haproxy import RunningHAProxy, region_servers, running_haproxy

pytestmark = pytest.mark.server

REGIONS = ("us-east", "eu-west", "ap-south")
POPS = ("edge-1", "edge-2")


class RecordingRuntime(RuntimeApi):
    """The real runtime API, remembering every command line it sent."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.sent: list[str] = []

    async def command(self, line: str) -> str:
        self.sent.append(line)
        return await super().command(line)

    def writes_sent(self) -> list[str]:
        return [
            c for line in self.sent for c in line.split(";") if not c.startswith(("show ", "get "))
        ]


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[RunningHAProxy]:
    with (
        region_servers(REGIONS) as servers,
        running_haproxy(tmp_path, pops=POPS, regions=servers.ports) as running,
    ):
        yield running


def recording(proxy: RunningHAProxy) -> tuple[HAProxyFleet, RecordingRuntime]:
    runtime = RecordingRuntime(str(proxy.socket_path))
    fleet = HAProxyFleet(
        runtime, load_topology(proxy.topology_path), routing_map=str(proxy.map_path)
    )
    return fleet, runtime


def split(shares: dict[str, float]) -> RoutingWrite:
    return RoutingWrite(fractions={pop: dict(shares) for pop in POPS})


async def regions_seen(port: int, users: int = 60, header: bool = True) -> Counter[str]:
    async with httpx.AsyncClient(timeout=10) as client:
        answers = [
            await client.get(
                f"http://127.0.0.1:{port}/", headers={"x-user": f"user-{i}"} if header else {}
            )
            for i in range(users)
        ]
    assert all(a.status_code == 200 for a in answers)
    return Counter(a.text for a in answers)


class TestIdempotency:
    """Every write compares the live state first: the same target twice writes nothing
    the second time, and answers the table (same version) instead of a conflict."""

    async def test_same_target_twice_is_no_write(self, proxy: RunningHAProxy) -> None:
        fleet, runtime = recording(proxy)
        await adopt(fleet)
        before = await fleet.routing()
        target = split({"us-east": 0.5, "eu-west": 0.5})
        first = await fleet.write_routing(target, if_match=before.version, idempotency_key="a")
        assert first.version == before.version + 1
        runtime.sent.clear()
        again = await fleet.write_routing(target, if_match=before.version, idempotency_key="a")
        assert runtime.writes_sent() == []
        assert again.version == first.version
        assert again.buckets == first.buckets

    async def test_same_weight_twice_is_no_write(self, proxy: RunningHAProxy) -> None:
        fleet, runtime = recording(proxy)
        await adopt(fleet)
        change = ServiceWeightChange(region="eu-west", service="web", weight=0.5)
        first = await fleet.set_service_weight(change, idempotency_key="w")
        assert first.detail["commands"] == ["set server web/eu-west weight 50"]
        runtime.sent.clear()
        again = await fleet.set_service_weight(change, idempotency_key="w")
        assert again.detail["applied"] is False
        assert runtime.writes_sent() == []

    async def test_interrupted_write_is_resumed_by_its_writer_only(
        self, proxy: RunningHAProxy
    ) -> None:
        fleet, _ = recording(proxy)
        await adopt(fleet)
        version = (await fleet.routing()).version
        m = fleet.routing_map
        # What a writer that died after its claim leaves behind.
        await fleet.runtime.writes(
            [
                f"del map {m} __orchestrator.gen.{version}",
                f"add map {m} {WRITING_KEY} {version + 1}.{writer_tag('dead')}",
            ]
        )
        target = split({"ap-south": 1.0})
        # Readers wait for it; another writer holding the old version has lost it.
        with pytest.raises(FleetUnavailable, match="under way"):
            await fleet.routing()
        with pytest.raises(VersionConflict, match="another writer"):
            await fleet.write_routing(target, if_match=version, idempotency_key="other")
        table = await fleet.write_routing(target, if_match=version, idempotency_key="dead")
        assert table.version == version + 1
        assert (await check(fleet)).ok


class TestRacingWriters:
    """Two writers holding the same version: exactly one wins, the other gets a
    VersionConflict, and the map holds the winner's table at the next version."""

    async def test_one_wins_per_version(self, proxy: RunningHAProxy) -> None:
        one, _ = recording(proxy)
        two, _ = recording(proxy)
        await adopt(one)
        for round_ in range(8):
            live = await one.routing()
            assert live.buckets is not None
            # Two targets that both differ from the live table, so neither is a no-op.
            others = [r for r in REGIONS if r not in set(live.buckets["edge-1"])]
            version = live.version
            targets = [split({others[0]: 1.0}), split({others[1]: 1.0})]
            results = await asyncio.gather(
                one.write_routing(targets[0], if_match=version, idempotency_key=f"1/{round_}"),
                two.write_routing(targets[1], if_match=version, idempotency_key=f"2/{round_}"),
                return_exceptions=True,
            )
            won = [r for r in results if not isinstance(r, BaseException)]
            lost = [r for r in results if isinstance(r, BaseException)]
            assert len(won) == 1 and len(lost) == 1, results
            assert isinstance(lost[0], VersionConflict)
            live = await one.routing()
            assert live.version == version + 1
            assert live.buckets == won[0].buckets


class TestRestart:
    """A proxy restarted from its config file is detected: reads and writes refuse,
    `haproxy check` says why, `haproxy adopt` makes it steerable again, and a writer's
    version from before the restart is stale."""

    async def test_refuse_until_adopted(self, proxy: RunningHAProxy) -> None:
        fleet, _ = recording(proxy)
        await adopt(fleet)
        old = await fleet.write_routing(
            split({"eu-west": 1.0}), if_match=(await fleet.routing()).version, idempotency_key="x"
        )
        proxy.stop()
        proxy.start()
        with pytest.raises(ProxyStateLost, match="adopt"):
            await fleet.routing()
        with pytest.raises(ProxyStateLost):
            await fleet.write_routing(
                split({"ap-south": 1.0}), if_match=old.version, idempotency_key="y"
            )
        with pytest.raises(ProxyStateLost):
            await fleet.set_service_weight(
                ServiceWeightChange(region="eu-west", service="web", weight=0),
                idempotency_key="z",
            )
        args = [
            "--socket",
            str(proxy.socket_path),
            "--map",
            str(proxy.map_path),
            "--topology",
            str(proxy.topology_path),
            "--json",
        ]
        runner = CliRunner()
        # The CLI runs its own event loop: call it from a thread, as from a shell.
        checked = await asyncio.to_thread(runner.invoke, app, ["haproxy", "check", *args])
        assert checked.exit_code == 1
        assert json.loads(checked.stdout)["boot"] is None
        adopted = await asyncio.to_thread(runner.invoke, app, ["haproxy", "adopt", "--yes", *args])
        assert adopted.exit_code == 0, adopted.output
        assert json.loads(adopted.stdout)["ok"] is True
        table = await fleet.routing()
        # The file's routing (all in the first region), not the lost write.
        assert set(table.buckets["edge-1"]) == {"us-east"}
        with pytest.raises(VersionConflict):
            await fleet.write_routing(
                split({"ap-south": 1.0}), if_match=old.version, idempotency_key="y"
            )


class TestTraffic:
    """Real requests through HAProxy follow a routing write (by user bucket) and a drain
    (by server state) at once, with no reload."""

    async def test_routing_change_moves_users(self, proxy: RunningHAProxy) -> None:
        fleet, _ = recording(proxy)
        await adopt(fleet)
        port = proxy.pop_ports["edge-1"]
        assert set(await regions_seen(port)) == {"us-east"}
        version = (await fleet.routing()).version
        table = await fleet.write_routing(
            split({"us-east": 0.5, "ap-south": 0.5}), if_match=version, idempotency_key="r"
        )
        seen = await regions_seen(port)
        assert set(seen) == {"us-east", "ap-south"}
        await fleet.write_routing(
            split({"eu-west": 1.0}), if_match=table.version, idempotency_key="r2"
        )
        assert set(await regions_seen(port)) == {"eu-west"}

    async def test_drain_and_restore(self, proxy: RunningHAProxy) -> None:
        fleet, _ = recording(proxy)
        await adopt(fleet)
        port = proxy.service_ports["web"]
        assert set(await regions_seen(port, header=False)) == set(REGIONS)
        drain = ServiceWeightChange(region="eu-west", service="web", weight=0)
        await fleet.set_service_weight(drain, idempotency_key="d")
        assert set(await regions_seen(port, header=False)) == {"us-east", "ap-south"}
        assert (await fleet.topology()).service_weights["eu-west/web"] == 0
        restore = ServiceWeightChange(region="eu-west", service="web", weight=1)
        result = await fleet.set_service_weight(restore, idempotency_key="u")
        assert result.detail["commands"] == ["set server web/eu-west state ready"]
        assert set(await regions_seen(port, header=False)) == set(REGIONS)


class TestBigMap:
    """3 regions x 1,024 buckets per PoP: every entry HAProxy holds is the target's."""

    async def test_written_correctly(self, tmp_path: Path) -> None:
        with (
            region_servers(REGIONS) as servers,
            running_haproxy(
                tmp_path, pops=("a", "b", "c"), regions=servers.ports, bucket_count=1024
            ) as proxy,
        ):
            fleet, _ = recording(proxy)
            await adopt(fleet)
            version = (await fleet.routing()).version
            third = 1 / 3
            write = RoutingWrite(
                fractions={p: dict.fromkeys(REGIONS, third) for p in ("a", "b", "c")}
            )
            table = await fleet.write_routing(write, if_match=version, idempotency_key="big")
            live = parse_map(await fleet.runtime.command(f"show map {fleet.routing_map}"))
            assert not live.duplicates
            assert table.buckets is not None
            for pop, regions in table.buckets.items():
                assert [live.entries[f"{pop}/{b}"] for b in range(1024)] == regions
                assert sorted(Counter(regions).values()) == [341, 341, 342]
            assert (await fleet.routing()).buckets == table.buckets


class TestStats:
    """``show stat`` rows count what HAProxy really served, server by server."""

    async def test_server_rows_count_the_requests_each_region_answered(
        self, proxy: RunningHAProxy
    ) -> None:
        fleet, _ = recording(proxy)
        await adopt(fleet)
        version = (await fleet.routing()).version
        await fleet.write_routing(
            split({"us-east": 0.5, "ap-south": 0.5}), if_match=version, idempotency_key="s"
        )
        seen = await regions_seen(proxy.pop_ports["edge-1"], users=40)
        rows = await RuntimeApi(str(proxy.socket_path)).stats()
        # each region's backend has one server, "web"
        served = {
            r["pxname"]: int(r["stot"])
            for r in rows
            if r["pxname"] in REGIONS and r["svname"] == "web"
        }
        assert set(seen) == {"us-east", "ap-south"}
        assert served == {region: seen.get(region, 0) for region in REGIONS}
        assert {"FRONTEND", "BACKEND"} <= {r["svname"] for r in rows}


class TestOverTcpAndRefusals:
    """The runtime API over TCP works like the unix socket; what HAProxy cannot do is
    refused by name, a wrong map name says which setting, and health is missing data,
    never zeros."""

    async def test_tcp_socket(self, proxy: RunningHAProxy) -> None:
        fleet = HAProxyFleet(
            RuntimeApi(f"tcp:127.0.0.1:{proxy.tcp_port}"),
            load_topology(proxy.topology_path),
            routing_map=str(proxy.map_path),
        )
        assert (await adopt(fleet)).ok
        table = await fleet.routing()
        new = await fleet.write_routing(
            split({"eu-west": 1.0}), if_match=table.version, idempotency_key="tcp"
        )
        assert new.version == table.version + 1

    async def test_refusals(self, proxy: RunningHAProxy) -> None:
        fleet, _ = recording(proxy)
        with pytest.raises(FleetRejected, match="cannot move shard primaries"):
            await fleet.move_shards(
                ShardMove(shards=["s1"], to_region="eu-west"), idempotency_key="s"
            )
        wrong = HAProxyFleet(
            RuntimeApi(str(proxy.socket_path)),
            load_topology(proxy.topology_path),
            routing_map="/nowhere.map",
        )
        with pytest.raises(FleetRejected, match="ORCHESTRATOR_HAPROXY_MAP"):
            await wrong.routing()
        health = await fleet.health(30)
        assert [r.samples for r in health.regions] == [0, 0, 0]
        assert all(r.p99_ms is None and r.rps is None for r in health.regions)
