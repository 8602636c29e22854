"""``lab serve --data-plane haproxy --faults``: the lab's training faults and buildings'
power beside HAProxy. A building's power loss takes its GPU hosts and its share of its
region's HAProxy connections, as it takes the Python lab's slots; what this data plane
cannot show (a whole region dark, the traffic faults) is refused before anything moves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.haproxy.config import server_maxconn
from tests.lab.haproxy.serving import Served, lab_serve, web_limits
from tests.lab.haproxy.test_data_plane import lab_config

pytestmark = pytest.mark.server


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with lab_serve(tmp_path, "--faults") as running:
        yield running


class TestBuildingPower:
    """A power loss halves east's connections and downs its GPU hosts; the restore brings
    both back; the last building of a region is refused with nothing changed."""

    async def test_loss_restore_and_the_last_building(self, served: Served) -> None:
        full = server_maxconn(lab_config(internal=True), "east", "web")
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as lab:
            lost = await lab.post("/lab/buildings/e1/power-loss")
            during = await web_limits(served)
            async with HttpFleet(served.url) as fleet:
                hosts = (await fleet.training_cluster()).hosts
            last = await lab.post("/lab/buildings/e2/power-loss")
            after_refusal = await web_limits(served)
            restored = await lab.post("/lab/buildings/e1/power-restore")
            after = await web_limits(served)
        assert lost.status_code == 200, lost.text
        assert lost.json()["power_share"] == 0.5
        assert during["east"] == round(full * 0.5) and during["west"] == full
        assert {h.state for h in hosts if h.building == "e1"} == {"down"}
        assert {h.state for h in hosts if h.building == "e2"} != {"down"}
        assert last.status_code == 400
        assert "last building with power" in last.json()["reason"]
        assert after_refusal == during
        assert restored.status_code == 200
        assert after["east"] == full


class TestRefused:
    """The Python lab's traffic faults are refused by name: nothing is half-shown."""

    async def test_traffic_faults(self, served: Served) -> None:
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as lab:
            answer = await lab.post("/lab/faults", json={"region_outage": ["east"]})
            truth = await lab.get("/lab/truth")
        assert answer.status_code == truth.status_code == 400
        assert "traffic faults" in answer.json()["reason"]
        assert served.info["faults"] is True
