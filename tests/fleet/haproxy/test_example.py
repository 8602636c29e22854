"""examples/haproxy/ works as shipped: HAProxy runs its haproxy.cfg, and the orchestrator,
configured by its orchestrator.toml and topology.yaml, checks, adopts and steers it."""

from __future__ import annotations

import subprocess as sp
from pathlib import Path

import pytest

from orchestrator.config import load_settings
from orchestrator.fleet.configured import haproxy_fleet
from orchestrator.fleet.haproxy.admin import adopt, check
from orchestrator.models import RoutingWrite, ServiceWeightChange
from orchestrator.ports import free_port
from testkit.haproxy import HAPROXY, RunningHAProxy

pytestmark = pytest.mark.server

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "haproxy"


def test_config_is_valid(tmp_path: Path) -> None:
    config = _localised(tmp_path)
    checked = sp.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_steered_as_configured(tmp_path: Path) -> None:
    config = _localised(tmp_path)
    proxy = RunningHAProxy(
        directory=tmp_path,
        socket_path=tmp_path / "admin.sock",
        map_path=tmp_path / "routing.map",
        config_path=config,
        topology_path=EXAMPLE / "topology.yaml",
        pop_ports={},
        service_ports={},
    )
    settings = load_settings({}, config_file=EXAMPLE / "orchestrator.toml")
    assert settings.fleet == "haproxy"
    settings = settings.model_copy(
        update={
            "haproxy_socket": str(proxy.socket_path),
            "haproxy_map": str(proxy.map_path),
            "haproxy_topology": EXAMPLE / "topology.yaml",
        }
    )
    fleet = haproxy_fleet(settings)
    proxy.start()
    try:
        before = await check(fleet)
        assert before.boot is None and before.missing_buckets == 0
        assert before.missing_servers == []
        assert (await adopt(fleet)).ok
        table = await fleet.routing()
        assert table.fractions["edge-eu"]["eu-west"] == 1.0
        shares = {"us-east": 0.5, "eu-west": 0.5}
        write = RoutingWrite(fractions={p: shares for p in ("edge-us", "edge-eu", "edge-ap")})
        new = await fleet.write_routing(write, if_match=table.version, idempotency_key="e")
        assert new.fractions["edge-ap"] == {"us-east": 0.5, "eu-west": 0.5, "ap-south": 0.0}
        drain = ServiceWeightChange(region="eu-west", service="api", weight=0.0)
        result = await fleet.set_service_weight(drain, idempotency_key="d")
        assert result.detail["commands"] == ["set server api/eu-west state drain"]
    finally:
        proxy.stop()


def _localised(tmp_path: Path) -> Path:
    """The example with its map and socket in ``tmp_path`` and free ports."""
    (tmp_path / "routing.map").write_text((EXAMPLE / "routing.map").read_text())
    text = (EXAMPLE / "haproxy.cfg").read_text()
    text = text.replace("/etc/haproxy/maps/routing.map", str(tmp_path / "routing.map"))
    text = text.replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock"))
    for port in ("8001", "8002", "8003", "8100", "127.0.0.1:8404"):
        text = text.replace(f"bind :{port}", f"bind 127.0.0.1:{free_port()}")
        text = text.replace(f"bind {port}", f"bind 127.0.0.1:{free_port()}")
    config = tmp_path / "haproxy.cfg"
    config.write_text(text)
    return config
