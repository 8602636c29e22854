"""A building's power loss takes its GPU hosts and its share of its region's serving capacity.

The default lab's eu-west has two buildings with an equal share: losing euw-a halves every
eu-west pool (web: 6 slots of 80 ms, 75 rps, down to 3 slots, 37.5 rps); restoring the
power brings the pools and the hosts back.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from orchestrator.exceptions import ConfigError
from orchestrator.lab.config import LabConfig, load_config, parse_config
from orchestrator.lab.errors import ApiError
from orchestrator.lab.runtime import LabRuntime
from tests.fixtures.lab import LabFactory


def _eu_west_only(**region_changes: Any) -> LabConfig:
    """The shipped lab with every PoP routed to eu-west, so its pools take all the load."""
    data = load_config().model_dump(mode="json")
    data["initial_routing"] = {p["name"]: {"eu-west": 1.0} for p in data["pops"]}
    for region in data["regions"]:
        if region["name"] == "eu-west":
            region.update(region_changes)
    return parse_config(data, source="test")


class TestBuildingShares:
    """Each building holds a share of its region (equal by default, or as configured)."""

    def test_topology_reports_buildings_with_region_and_share(self) -> None:
        topology = load_config().topology()
        euw_a = topology.building("euw-a")
        assert (euw_a.region, euw_a.share, euw_a.powered) == ("eu-west", 0.5, True)
        assert topology.building_share("euw-b") == 0.5

    def test_configured_shares(self) -> None:
        config = _eu_west_only(building_shares={"euw-a": 0.75, "euw-b": 0.25})
        assert config.topology().building_share("euw-a") == 0.75

    @pytest.mark.parametrize(
        ("shares", "reason"),
        [
            ({"euw-a": 0.5, "euw-x": 0.5}, "needs exactly the buildings"),
            ({"euw-a": 0.5, "euw-b": 0.25}, "not 1"),
            ({"euw-a": 1.0, "euw-b": 0.0}, "greater than 0"),
        ],
    )
    def test_bad_shares_name_the_field(self, shares: dict[str, float], reason: str) -> None:
        with pytest.raises(ConfigError, match="building_shares") as err:
            _eu_west_only(building_shares=shares)
        assert reason in str(err.value)


class TestLivePools:
    """Live mode: the building's share of every pool in its region goes; restore returns it."""

    def test_power_loss_halves_every_pool_of_the_region(self) -> None:
        runtime = LabRuntime(load_config(), "live", seed=1)
        assert runtime.live is not None
        pools = runtime.live.pools
        runtime.set_power("euw-a", False)
        assert pools[("eu-west", "web")].slots == 3
        assert pools[("eu-west", "kv")].slots == 8
        assert pools[("us-east", "web")].slots == 8
        assert runtime.truth()["effective_capacity_rps"]["eu-west"]["web"] == 37.5
        down = [h for h in runtime.training.cluster().hosts if h.building == "euw-a"]
        assert down and {h.state.value for h in down} == {"down"}
        runtime.set_power("euw-a", True)
        assert pools[("eu-west", "web")].slots == 6
        assert runtime.truth()["effective_capacity_rps"]["eu-west"]["web"] == 75.0

    async def test_whole_region_dark_serves_nothing(self) -> None:
        runtime = LabRuntime(_eu_west_only(), "live", seed=1)
        assert runtime.live is not None
        runtime.set_power("euw-a", False)
        runtime.set_power("euw-b", False)
        answer = await runtime.live.serve_edge("lon", "u1", "web")
        assert (answer.status, answer.body["error"]) == (503, "PowerLost")

    def test_unknown_building_is_a_404_naming_the_field(self) -> None:
        runtime = LabRuntime(load_config(), "live", seed=1)
        with pytest.raises(ApiError) as err:
            runtime.set_power("nowhere", False)
        assert (err.value.status, err.value.field) == (404, "building")


class TestModelCapacity:
    """Model mode: the same capacity in numbers; load past it shows as errors."""

    def test_power_loss_halves_capacity_and_errors_follow(self) -> None:
        # web gets 0.8 of 62.5 rps = 50 rps: under 75, over the 37.5 left after the loss
        config = _eu_west_only().model_copy(
            update={"demand": load_config().demand.model_copy(update={"total_rps": 62.5})}
        )
        runtime = LabRuntime(config, "model")
        assert runtime.model is not None
        web = runtime.model.services.index("web")
        euw = runtime.model.regions.index("eu-west")

        def web_health() -> tuple[float, float | None]:
            report = runtime.health(10)
            entry = next(s for s in report.services if (s.region, s.service) == ("eu-west", "web"))
            return float(runtime.model.capacities()[euw, web]), entry.error_rate  # type: ignore[union-attr]

        assert web_health() == (75.0, 0.0)
        runtime.set_power("euw-a", False)
        capacity, errors = web_health()
        assert capacity == 37.5
        assert errors == pytest.approx(1 - 37.5 / 50)
        runtime.set_power("euw-a", True)
        assert web_health() == (75.0, 0.0)


async def _offer(
    client: httpx.AsyncClient, rps: float, seconds: float, tag: str
) -> tuple[list[int], float]:
    """Open-loop web requests at ``rps`` from lon (all routed to eu-west): their statuses,
    and how long the sending took (longer than ``seconds`` when this process falls behind)."""
    count = int(rps * seconds)
    started = time.monotonic()
    tasks = []
    for i in range(count):
        await asyncio.sleep(max(0.0, started + i / rps - time.monotonic()))
        tasks.append(
            asyncio.create_task(
                client.get("/edge/lon", params={"user": f"{tag}{i}", "service": "web"})
            )
        )
    sent_for = time.monotonic() - started
    return [r.status_code for r in await asyncio.gather(*tasks)], sent_for


class TestLiveLab:
    """On a real lab over HTTP: one fault route cuts the building, /metrics and topology say so."""

    @pytest.mark.solo
    async def test_power_loss_caps_served_rps_and_restore_lifts_it(
        self, start_lab: LabFactory, tmp_path: Path
    ) -> None:
        config = tmp_path / "lab.yaml"
        config.write_text(yaml.safe_dump(_eu_west_only().model_dump(mode="json")))
        # its own process: the client's pauses then never stall the lab's clock
        lab = await start_lab(config, faults=True, subprocess=True)
        async with lab.http() as client:
            assert (await client.post("/lab/buildings/euw-a/power-loss")).status_code == 200
            # 25 rps is under the 37.5 left: no 503
            below, _ = await _offer(client, 25, 4, "below")
            assert below.count(503) == 0
            # 60 rps is over it: what the 3 slots and the queue cannot hold gets 503
            above, sent_for = await _offer(client, 60, 4, "above")
            assert above.count(503) > 0
            # served: at most the remaining capacity over the sending time (one service
            # time more for the last), the queue, and its 3 slots
            assert above.count(200) <= 37.5 * (sent_for + 0.08) + 12 + 3
            restored = await client.post("/lab/buildings/euw-a/power-restore")
            assert restored.json()["power_share"] == 1.0
            # 45 rps, over the half and under the whole, fits in the whole region again
            after, _ = await _offer(client, 45, 4, "after")
            assert after.count(503) == 0

    async def test_fault_route_topology_and_metric(self, start_lab: LabFactory) -> None:
        lab = await start_lab(load_config(), mode="model", faults=True)
        async with lab.http() as client:
            answer = await client.post("/lab/buildings/euw-a/power-loss")
            body = answer.json()
            assert (body["region"], body["powered"], body["power_share"]) == (
                "eu-west",
                False,
                0.5,
            )
            assert body["training"]["kind"] == "power-loss"
            topology = (await client.get("/v1/topology")).json()
            powered = {b["name"]: b["powered"] for b in topology["buildings"]}
            assert powered["euw-a"] is False and powered["euw-b"] is True
            # the region's capacity is what its powered buildings hold
            euw = next(r for r in topology["regions"] if r["name"] == "eu-west")
            assert euw["capacity_rps"]["web"] == 37.5
            metrics = (await client.get("/metrics")).text
            assert 'lab_building_power{building="euw-a",region="eu-west"} 0.0' in metrics
            assert 'lab_building_power{building="euw-b",region="eu-west"} 1.0' in metrics
            missing = await client.post("/lab/buildings/nowhere/power-loss")
            assert (missing.status_code, missing.json()["field"]) == (404, "building")
            # the training fault route is the same fault: it restores the traffic share too
            await client.post("/lab/training/faults/power-restore", json={"building": "euw-a"})
            truth = (await client.get("/lab/truth")).json()
            assert truth["unpowered_buildings"] == []
            assert truth["effective_capacity_rps"]["eu-west"]["web"] == 75.0
