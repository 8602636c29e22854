"""What a Prometheus scrapes from the HAProxy lab: HAProxy's exporter and each region
backend's ``/metrics``, whose latency counts the time a request waited in HAProxy's queue."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import yaml

from orchestrator.lab.haproxy.config import RULES
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.models import RegionHealth
from tests.lab.haproxy.test_data_plane import edge, lab_config
from tests.metrics.promtool import check_config, check_metrics

pytestmark = pytest.mark.server

#: the tiny region's service time; it has one slot and one queue place
TINY_MS = 200


async def test_latency_counts_the_wait_in_haproxys_queue(tmp_path: Path) -> None:
    """p2 sends all its users to the tiny region: a request served after waiting for the
    one slot took about two service times, which only the accept stamp can show (the
    backend itself holds it one service time)."""
    with HAProxyDataPlane(lab_config(tiny_ms=TINY_MS), tmp_path) as plane:
        async with httpx.AsyncClient(timeout=30) as client:
            for _ in range(4):
                # two at once: one is served, the other waits for its slot in the queue
                await asyncio.gather(*(edge(client, plane, "p2", f"q-{i}") for i in range(2)))
            view = (await client.get(f"{plane.region_url('tiny')}/lab/health")).json()
            text = (await client.get(f"{plane.region_url('tiny')}/metrics")).text
            haproxy = (await client.get(plane.metrics_url)).text
    tiny = RegionHealth.model_validate(view["region"])
    assert tiny.samples == 8 and tiny.p50_ms is not None and tiny.p99_ms is not None
    assert tiny.p50_ms >= TINY_MS
    assert tiny.p99_ms >= 1.8 * TINY_MS, tiny
    # the web pool's latency too: queued for its slot, then held (the lab's pool latency)
    [web] = [s for s in view["services"] if s["service"] == "web"]
    assert web["p99_ms"] >= 1.8 * TINY_MS, web
    # the exported histogram holds the same requests: four of them past 1.5 service times
    assert 'lab_region_request_duration_seconds_count{region="tiny"} 8.0' in text
    assert 'lab_region_request_duration_seconds_bucket{le="0.3",region="tiny"} 4.0' in text
    assert 'lab_pop_requests_total{pop="p2"} 8.0' in text
    assert 'lab_service_requests_total{region="tiny",service="web"} 8.0' in text
    assert check_metrics(text) == ""
    assert 'haproxy_server_sessions_total{proxy="web",server="tiny"} 8' in haproxy


async def test_scrape_config_names_every_target(tmp_path: Path) -> None:
    """The prometheus.yml the plane writes lists HAProxy's exporter and every backend, each
    target answers ``/metrics``, and it loads the lab's rules (the package's file, by absolute
    path), which promtool accepts with it."""
    with HAProxyDataPlane(lab_config(), tmp_path) as plane:
        config = yaml.safe_load(plane.layout.prometheus_path.read_text())
        assert config["rule_files"] == [str(RULES.resolve())] and RULES.is_absolute()
        assert check_config(plane.layout.prometheus_path) == ""
        targets = {
            job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]
        }
        assert targets == plane.layout.scrape_targets()
        assert len(targets["lab-regions"]) == len(plane.config.regions)
        async with httpx.AsyncClient(timeout=10) as client:
            for target in [t for group in targets.values() for t in group]:
                answer = await client.get(f"http://{target}/metrics")
                assert answer.status_code == 200, target
                assert "haproxy_" in answer.text or "lab_region_requests_total" in answer.text
